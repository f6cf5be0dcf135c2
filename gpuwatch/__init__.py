"""gpuwatch: GPU observability and FinOps for Kubernetes GPU clusters."""

__version__ = "0.1.0"
