"""Nodeloom's application layer: the command line (`app/cli.py`) and the desktop GUI (`app/gui/`).

The only package that imports Qt. Imports `nodes`, `pipelines`, `memory`.
"""
