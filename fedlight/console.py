"""The ``fedlight`` command (the console script, and ``python -m fedlight``).

Importing torch, Lightning and torchmetrics creates a few million objects that live as long as
the process. Python's garbage collector would walk them all at each full collection during the
imports and once more at exit, only to find nothing to free: on a 2-core CPU that was 1.5 s of
CPU during the imports and 1-3 s of wall at exit, measured per command. So the command imports
with the collector off, then freezes what the imports made (``gc.freeze``: later collections
skip those objects; forked worker processes also stop copying their memory pages when the
collector would touch them), and freezes again before the process ends.
"""

from __future__ import annotations

import gc


def main() -> None:
    """Run ``fedlight`` with the arguments of the command line."""
    gc.disable()
    try:
        from fedlight.cli import main as run_command
    finally:
        gc.freeze()
        gc.enable()
    try:
        run_command()
    finally:
        gc.freeze()  # the final collection at exit then walks nothing
