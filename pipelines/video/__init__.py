"""Video values that need no model: frames + fps + an optional audio track (`pipelines.video.value`).

May import: stdlib, numpy, torch. Never nodes, app or Qt. File formats (PyAV, Pillow) live in nodes/video_*.py.
"""
