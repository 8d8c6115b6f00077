"""File > Import: turn another tool's file (a ComfyUI workflow, ...) into a Nodeloom workflow.

Lives here: `IMPORT_FILTER`, `ImportUnavailable`, `import_file`. Imports `nodes`; no Qt (the GUI's
File > Import… calls `import_file`; a CLI `app import` can call it too).

A hook for now: the importers themselves (issue 14) fill in `import_file`.
"""

from __future__ import annotations

from pathlib import Path

from nodes.registry import NodeRegistry
from nodes.workflow import Workflow

IMPORT_FILTER = "ComfyUI workflows (*.json *.png);;All files (*)"


class ImportUnavailable(Exception):
    """No importer handles this file (the message says what is supported)."""


def import_file(path: Path, registry: NodeRegistry) -> Workflow:
    """Read `path` (another tool's workflow) as a Workflow ready to open in the editor."""
    raise ImportUnavailable(f"{Path(path).name}: importing other tools' workflows is not available yet")
