"""specbatch: config-driven batch generation with vLLM speculative decoding, to Parquet and MLflow."""
