"""Data: the images a run calibrates and evaluates on (``sources``: folders, the embedded
default, synthetic images; ``hf``: Hugging Face datasets)."""
