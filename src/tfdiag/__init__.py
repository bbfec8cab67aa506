"""tfdiag: diagnostics and profiling for distributed TensorFlow training."""

__version__ = "0.1.0"
