"""Batch runs: sweeps of a workflow's parameters, locally or on a Ray cluster, with one report.

Lives here: the runners (`local`, `cluster`), the worker both use (`worker`), the report (`report`), the
contact sheet (`contact_sheet`) and the CLI glue (`cli`). Imports `nodes`, `memory`, `pipelines.paths`, rich,
PIL; Ray only inside `cluster`, only when asked for. No Qt (the GUI dialog lives in app/gui).
"""
