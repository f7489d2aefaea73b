"""fedlight: personalized federated learning on PyTorch Lightning and Fabric."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("fedlight")
except PackageNotFoundError:  # a source tree used without installing it
    __version__ = "unknown"
