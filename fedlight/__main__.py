"""``python -m fedlight ...``: the ``fedlight`` command."""

from fedlight.console import main

main()
