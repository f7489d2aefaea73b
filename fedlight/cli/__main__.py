"""``python -m fedlight.cli ...``: the ``fedlight`` command."""

from fedlight.cli.commands import main

main()
