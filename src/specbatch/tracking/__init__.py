"""MLflow: the only package that opens a tracking client (shard runs, sweeps, merged runs, reports)."""
