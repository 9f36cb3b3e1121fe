"""qbench: post-training INT8 quantization and accuracy validation for Apache TVM Relax."""

__version__ = "0.1.0"
