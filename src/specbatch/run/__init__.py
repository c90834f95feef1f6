"""The shard executor: run folder, locks, shards and chunks, records, summaries, merges and sweeps."""
