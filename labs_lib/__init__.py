"""LLM Inference Labs: KV math, engines, timing, sweeps, quantization and a doctor, for the notebooks."""

__version__ = "0.1.0"
