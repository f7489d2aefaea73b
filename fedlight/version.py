"""The installed fedlight's version (``fedlight.__version__``), written into every run folder."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("fedlight")
except PackageNotFoundError:  # a source tree used without installing it
    __version__ = "unknown"

__all__ = ["__version__"]
