"""Training and evaluation commands for Nodeloom's own shipped models; not part of the installed runtime.

Nothing in app/, nodes/, pipelines/ or memory/ imports this package: it runs only through its own commands
(`make train-shapes`, `make eval-shapes`, `python -m training.shapes.evaluate ...`) and the tests.
"""
