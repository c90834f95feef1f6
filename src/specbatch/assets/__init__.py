"""Where models and data come from: the embedded SmolLM2 model, the tiny random family, model-source checks."""
