"""Subgraphs in our own workflow format (nodes/subgraph.py): make one from nodes, save and reload it, expand it
back, promote a widget, and run it: `app --run` of a workflow with a subgraph gives the flattened graph's picture.
The editor commands on top of these are not built yet (issue 29)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from nodes.registry import default_registry
from nodes.subgraph import expand_instance, make_subgraph, promote_widget
from nodes.workflow import load_workflow, validate, workflow_from_dict
from tests.family_support import only_picture, run_workflow

REPO = Path(__file__).resolve().parent.parent
TXT2IMG = REPO / "resources/workflows/txt2img.json"


def test_make_save_reload_expand_gives_the_original_graph() -> None:
    registry = default_registry(entry_point_packs=False)
    original = load_workflow(TXT2IMG, registry)
    wf, instance = make_subgraph(original, ["positive", "negative"], title="Prompts")
    assert instance in wf.nodes and "positive" not in wf.nodes and len(wf.subgraphs) == 1
    (def_id,) = wf.subgraphs
    wf = promote_widget(wf, registry, def_id, "positive", "text")
    reloaded = workflow_from_dict(json.loads(json.dumps(wf.to_dict())), registry)
    assert validate(reloaded, registry) == []
    flat, ids = expand_instance(reloaded, instance)
    assert set(ids) == {"positive", "negative"} and not flat.subgraphs
    assert {n: v["type"] for n, v in flat.to_dict()["nodes"].items()} == {
        n: v["type"] for n, v in original.to_dict()["nodes"].items()
    }


@pytest.mark.slow
def test_a_workflow_with_a_subgraph_runs_like_the_flattened_one(tmp_path: Path) -> None:
    registry = default_registry(entry_point_packs=False)
    wf, _ = make_subgraph(load_workflow(TXT2IMG, registry), ["positive", "negative"], title="Prompts")
    path = tmp_path / "with_subgraph.json"
    path.write_text(json.dumps(wf.to_dict()))
    sets = {"sampler.steps": 2}
    assert run_workflow(TXT2IMG, tmp_path / "flat", sets) == 0
    assert run_workflow(path, tmp_path / "sub", sets) == 0
    # The same nodes run in the same order on the same CPU: the pixels are equal.
    assert np.array_equal(only_picture(tmp_path / "flat"), only_picture(tmp_path / "sub"))
