"""File > Import: turn another tool's file (a ComfyUI workflow, ...) into a Nodeloom workflow.

Lives here: `IMPORT_FILTER`, `ImportUnavailable`, `import_file`. Imports `nodes`; no Qt (the GUI's
File > Import… calls `import_file`; a CLI `app import` can call it too).

ComfyUI files (API or UI JSON, or a PNG ComfyUI saved) go through `nodes.comfy`, as `app import` does.
A graph with nodes this build cannot run is not opened: the problems list says which, by id and class.
"""

from __future__ import annotations

from pathlib import Path

from nodes.problems import Problem, WorkflowError
from nodes.registry import NodeRegistry
from nodes.workflow import Workflow, parse_workflow

IMPORT_FILTER = "ComfyUI workflows (*.json *.png);;All files (*)"


class ImportUnavailable(Exception):
    """No importer handles this file (the message says what is supported)."""


def import_file(path: Path, registry: NodeRegistry, keep_subgraphs: bool = True) -> Workflow:
    """Read `path` (another tool's workflow) as a Workflow ready to open in the editor; ComfyUI subgraph
    instances become subgraphs (nodes.comfy.subgraph_fold) unless `keep_subgraphs` is off."""
    from nodes.comfy.api_format import ComfyFormatError
    from nodes.comfy.sources import import_comfy, workflow_text

    try:
        result = import_comfy(Path(path), registry)
        workflow_text(result.workflow, str(path))  # what Save would write must read back, as for `app import`
    except ComfyFormatError as exc:
        raise ImportUnavailable(
            f"{exc}\nSupported: ComfyUI workflows (API or UI JSON) and PNGs ComfyUI saved."
        ) from exc
    if result.unsupported:
        raise WorkflowError(
            [Problem(str(path), u.node, "type", f"{u.class_type}: {u.reason}") for u in result.unsupported]
        )
    # Opened like any unfinished graph: remaining problems (a model file not found here) show in the editor.
    wf, _ = parse_workflow(result.workflow, registry, source=str(path))
    if keep_subgraphs:  # ComfyUI's subgraph instances stay subgraphs (they run as the flattened graph)
        from nodes.comfy.sources import read_comfy_data
        from nodes.comfy.subgraph_fold import fold_comfy_subgraphs

        wf = fold_comfy_subgraphs(wf, read_comfy_data(Path(path)), registry)
    return wf
