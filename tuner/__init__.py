"""tuner: a configuration autotuner for LLM serving engines (SGLang, vLLM)."""

__version__ = "0.1.0"
