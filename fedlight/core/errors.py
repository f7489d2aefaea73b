"""fedlight's user errors: what a user can fix (a bad option, value, file or name).

The ``fedlight`` commands print a user error as one line (``error: <message>``, exit code 2);
every other exception keeps its traceback, since it is a fault of fedlight or of a library, not
of the input. Each class also derives from the built-in exception a Python caller would expect
(``ValueError``, ``FileNotFoundError``...), so ``except ValueError`` keeps working.
"""

from __future__ import annotations


class FedlightError(Exception):
    """Base of the errors a user can fix; its message names the bad value and what is valid."""


class ConfigError(FedlightError, ValueError):
    """A bad option value, name or combination of options."""


class MissingFileError(FedlightError, FileNotFoundError):
    """A file or folder the user named (a dataset, a checkpoint, a config) that is not there."""


class TrainingDiverged(FedlightError, FloatingPointError):
    """Training produced a non-finite loss (usually a learning rate too high for the data)."""


class DamagedFileError(FedlightError, ValueError):
    """A file the user named that cannot be read as what it should be (a truncated
    checkpoint, another program's file)."""


class DownloadError(FedlightError, RuntimeError):
    """A dataset could not be downloaded (no network, a moved file); the message says where to
    put the files by hand instead."""


class DiskFullError(FedlightError, OSError):
    """The disk a run writes to has no space left; what was written before is intact."""


__all__ = ["ConfigError", "DamagedFileError", "DiskFullError", "DownloadError",
           "FedlightError",
           "MissingFileError", "TrainingDiverged"]
