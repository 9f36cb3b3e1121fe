"""Post-training quantization of Relax graphs: config, parameters and the rewrite."""

from .config import QuantConfig

__all__ = ["QuantConfig"]
