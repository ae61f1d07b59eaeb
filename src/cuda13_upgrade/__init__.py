"""cuda13-upgrade: move NVIDIA Blackwell inference hosts from CUDA 12.8 to CUDA 13."""

__version__ = "0.1.0"
