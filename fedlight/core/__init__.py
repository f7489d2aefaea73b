"""Contracts shared by every part of fedlight; this package imports nothing else of fedlight."""
