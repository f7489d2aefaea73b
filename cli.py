"""Top-level entry point: ``python cli.py fit -c ...`` is the same as ``fedlight fit -c ...``."""

from fedlight.console import main

if __name__ == "__main__":
    main()
