"""Reading what runs produced: comparisons of runs and sweeps, their plots, and the report logged to MLflow."""
