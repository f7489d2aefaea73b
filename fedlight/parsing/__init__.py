"""How fedlight reads a command line or a configuration and says what it refuses.

* :mod:`~fedlight.parsing.parser`: ``FedlightParser`` (the jsonargparse parser of
  ``fedlight fit`` and of every config fedlight reads: sweeps, Flower, analyses) and
  ``CommandParser`` (the argparse parser of a tool: report, sweep, interpolate, ...); both
  raise what they refuse as a ``UsageError``.
* :mod:`~fedlight.parsing.messages`: user errors as one line (``error: <message>``, exit code
  2, a "did you mean" where a close name exists), every other exception with its traceback.

Below :mod:`fedlight.config`, which builds runs with this parser; the commands themselves
are :mod:`fedlight.cli`.
"""
