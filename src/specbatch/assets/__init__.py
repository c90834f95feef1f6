"""Where models and data come from: the embedded SmolLM2 model and data, the tiny random family, their cache."""
