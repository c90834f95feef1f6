"""Rows from a dataset (local files or the hub) and the prompts rendered from them."""
