"""Top-level entry point: ``python cli.py fit -c configs/...`` is ``fedlight fit -c configs/...``."""

from fedlight.cli import main

if __name__ == "__main__":
    main()
