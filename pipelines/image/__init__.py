"""Image and mask operations that need no model: edges, line art, inversion, mask grow and feather.

May import: stdlib, numpy, torch, opencv (headless). Never nodes, app or Qt.
"""
