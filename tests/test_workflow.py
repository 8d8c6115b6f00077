"""Workflow files: round trip, schema, and every validation error reported at once."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from nodes.workflow import (
    Problem,
    WorkflowError,
    dumps_workflow,
    load_workflow,
    save_workflow,
    workflow_from_dict,
)
from tests.nodes_for_tests import Calls, chain_workflow, make_registry

REPO = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((REPO / "resources/schema/workflow.schema.json").read_text())
SHIPPED = sorted((REPO / "resources/workflows").glob("*.json"))


def test_round_trip_keeps_every_value(tmp_path: Path) -> None:
    registry = make_registry(Calls())
    wf = workflow_from_dict(chain_workflow(), registry, source="chain.json")
    path = tmp_path / "chain.json"
    save_workflow(wf, path)
    again = load_workflow(path, registry)
    assert again.to_dict() == wf.to_dict()
    assert again.nodes["sum"].inputs["a"].node == "one"
    assert again.ui["nodes"]["one"]["pos"] == [0, 0]
    jsonschema.validate(json.loads(path.read_text()), SCHEMA)


def test_save_is_atomic_and_leaves_no_temp_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    registry = make_registry(Calls())
    wf = workflow_from_dict(chain_workflow(), registry)
    path = tmp_path / "wf.json"
    save_workflow(wf, path)
    before = path.read_text()

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("nodes.files.os.replace", broken_replace)
    wf.nodes["one"].params["value"] = 50
    with pytest.raises(OSError):
        save_workflow(wf, path)
    assert path.read_text() == before  # the old file is intact
    assert [p.name for p in tmp_path.iterdir()] == ["wf.json"]


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_shipped_workflows_match_the_schema_and_load(path: Path) -> None:
    from nodes.registry import default_registry

    data = json.loads(path.read_text())
    jsonschema.validate(data, SCHEMA)
    load_workflow(path, default_registry(entry_point_packs=False))


def test_every_problem_is_reported_together() -> None:
    registry = make_registry(Calls())
    data = {
        "format": "nodeloom.workflow",
        "version": 1,
        "nodes": {
            "typo": {"type": "Numbr", "params": {"value": 1}},
            "big": {"type": "Number", "params": {"value": 500}},
            "style": {"type": "ToText", "params": {"style": "roman"}, "inputs": {"value": ["big", "value"]}},
            "half": {"type": "Add", "inputs": {"a": ["big", "value"]}},
            "extra": {
                "type": "Add",
                "inputs": {"a": ["big", "value"], "b": ["big", "value"], "c": ["big", "value"]},
            },
            "dangling": {"type": "Add", "inputs": {"a": ["ghost", "value"], "b": ["big", "value"]}},
            "badout": {"type": "Add", "inputs": {"a": ["big", "valeu"], "b": ["big", "value"]}},
            "mismatch": {"type": "Add", "inputs": {"a": ["style", "text"], "b": ["big", "value"]}},
            "loop1": {"type": "Add", "inputs": {"a": ["loop2", "value"], "b": ["big", "value"]}},
            "loop2": {"type": "Add", "inputs": {"a": ["loop1", "value"], "b": ["big", "value"]}},
            "unknownparam": {"type": "Number", "params": {"value": 1, "colour": "red"}},
        },
    }
    with pytest.raises(WorkflowError) as info:
        workflow_from_dict(data, registry, source="bad.json")
    found = {(p.node, p.field) for p in info.value.problems}
    reasons = {(p.node, p.field): p.reason for p in info.value.problems}
    assert all(p.file == "bad.json" for p in info.value.problems)
    assert ("typo", "type") in found and "unknown node type 'Numbr'" in reasons[("typo", "type")]
    assert "did you mean 'Number'" in reasons[("typo", "type")]
    assert "above the maximum 100" in reasons[("big", "value")]
    assert "not one of" in reasons[("style", "style")]
    assert "not connected" in reasons[("half", "b")]
    assert "unknown input" in reasons[("extra", "c")]
    assert "does not exist" in reasons[("dangling", "a")]
    assert "no output 'valeu'" in reasons[("badout", "a")]
    assert "type mismatch" in reasons[("mismatch", "a")] and "TEXT" in reasons[("mismatch", "a")]
    assert "cycle" in reasons[("loop1", "inputs")] and "cycle" in reasons[("loop2", "inputs")]
    assert not any(p.node == "big" and "cycle" in p.reason for p in info.value.problems)
    assert "unknown parameter" in reasons[("unknownparam", "colour")]
    message = str(info.value)
    assert message.count("\n  - ") == len(info.value.problems) >= 11


@pytest.mark.parametrize("version", [2, "1", None])
def test_unsupported_or_missing_version_is_refused(version: object) -> None:
    registry = make_registry(Calls())
    data = chain_workflow()
    data["version"] = version
    with pytest.raises(WorkflowError) as info:
        workflow_from_dict(data, registry, source="v.json")
    assert info.value.problems[0] == Problem("v.json", None, "version", info.value.problems[0].reason)
    assert "version" in info.value.problems[0].reason


def test_not_json_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"format": "nodeloom.workflow",\n "version": 1,,}')
    with pytest.raises(WorkflowError) as info:
        load_workflow(path, make_registry(Calls()))
    assert str(path) in str(info.value) and "line 2" in str(info.value)


def test_missing_params_take_defaults_and_wired_params_skip_their_widget() -> None:
    registry = make_registry(Calls())
    data = {
        "format": "nodeloom.workflow",
        "version": 1,
        "nodes": {
            "n": {"type": "Number", "params": {"value": 5}},
            "t": {"type": "ToText", "inputs": {"value": ["n", "value"]}},
            # `prefix` is a parameter of SaveText; here a wire feeds it instead of the widget.
            "s": {
                "type": "SaveText",
                "params": {"prefix": None},
                "inputs": {"text": ["t", "text"], "prefix": ["t", "text"]},
            },
        },
    }
    wf = workflow_from_dict(data, registry)
    assert wf.nodes["t"].params["style"] == "dec"
    assert "prefix" in wf.nodes["s"].inputs


def test_dumps_is_stable_json() -> None:
    wf = workflow_from_dict(chain_workflow(), make_registry(Calls()))
    assert json.loads(dumps_workflow(wf)) == wf.to_dict()


def test_a_node_downstream_of_a_cycle_is_not_blamed_for_it() -> None:
    registry = make_registry(Calls())
    data = {
        "format": "nodeloom.workflow",
        "version": 1,
        "nodes": {
            "n": {"type": "Number", "params": {"value": 1}},
            "a": {"type": "Add", "inputs": {"a": ["b", "value"], "b": ["n", "value"]}},
            "b": {"type": "Add", "inputs": {"a": ["a", "value"], "b": ["n", "value"]}},
            "c": {"type": "ToText", "inputs": {"value": ["b", "value"]}},
        },
    }
    with pytest.raises(WorkflowError) as info:
        workflow_from_dict(data, registry)
    assert {p.node for p in info.value.problems if "cycle" in p.reason} == {"a", "b"}


def test_a_damaged_layout_is_dropped_not_fatal() -> None:
    data = chain_workflow()
    data["ui"] = {
        "nodes": {"one": {"pos": "left"}, "two": {"pos": [1, 2]}, "sum": []},
        "groups": [{"title": "ok", "rect": [0, 0, 10, 10]}, {"title": "bad", "rect": [1]}],
        "view": 3,
    }
    wf = workflow_from_dict(data, make_registry(Calls()))
    assert wf.ui["nodes"] == {"one": {}, "two": {"pos": [1, 2]}}
    assert [g["title"] for g in wf.ui["groups"]] == ["ok"] and "view" not in wf.ui


def test_saving_keeps_the_file_permissions(tmp_path: Path) -> None:
    wf = workflow_from_dict(chain_workflow(), make_registry(Calls()))
    path = tmp_path / "wf.json"
    path.write_text("{}")
    path.chmod(0o644)
    save_workflow(wf, path)
    assert path.stat().st_mode & 0o777 == 0o644
