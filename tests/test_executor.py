"""The executor: order, what runs, caching across edits, failure and cancellation."""

from __future__ import annotations

import threading
from pathlib import Path

from nodes.context import CancelToken
from nodes.events import NodeCached, NodeFailed, NodeFinished, NodeProgress, NodeStarted, RunFinished
from nodes.executor import Executor
from nodes.workflow import workflow_from_dict
from tests.nodes_for_tests import Calls, chain_workflow, make_registry


def _setup() -> tuple[Calls, Executor]:
    calls = Calls()
    return calls, Executor(make_registry(calls))


def test_runs_only_what_the_outputs_need_in_topological_order(tmp_path: Path) -> None:
    calls, ex = _setup()
    wf = workflow_from_dict(chain_workflow(), ex.registry)
    started: list[str] = []
    result = ex.run(wf, out_dir=tmp_path, on_event=lambda e: started.append(e.node_id)
                    if isinstance(e, NodeStarted) else None)
    assert result.ok
    assert "other" not in calls.by_node  # nothing needs it
    assert started.index("sum") > max(started.index("one"), started.index("two"))
    assert started.index("text") > started.index("sum") and started[-1] == "save"
    saved = result.nodes["save"].files
    assert len(saved) == 1 and Path(saved[0]).read_text() == "3"


def test_only_the_edited_node_and_its_descendants_rerun(tmp_path: Path) -> None:
    calls, ex = _setup()
    wf = workflow_from_dict(chain_workflow(), ex.registry)
    ex.run(wf, out_dir=tmp_path)
    first = dict(calls.by_node)
    again = ex.run(wf, out_dir=tmp_path)
    assert calls.by_node == first
    assert {r.status for r in again.nodes.values()} == {"cached"}

    wf.nodes["text"].params["style"] = "hex"  # edit a node in the middle
    third = ex.run(wf, out_dir=tmp_path)
    assert {nid for nid, r in third.nodes.items() if r.status == "ran"} == {"text", "save"}
    assert {nid for nid, r in third.nodes.items() if r.status == "cached"} == {"one", "two", "sum"}

    wf.nodes["one"].params["value"] = 14  # edit the root: everything downstream re-runs
    fourth = ex.run(wf, out_dir=tmp_path)
    assert {nid for nid, r in fourth.nodes.items() if r.status == "ran"} == {"one", "sum", "text", "save"}
    assert Path(fourth.nodes["save"].files[0]).read_text() == "10"  # 14 + 2 in hex


def test_a_failing_node_stops_the_run_with_its_error(tmp_path: Path) -> None:
    calls, ex = _setup()
    data = chain_workflow()
    data["nodes"]["sum"] = {"type": "Boom", "inputs": {"value": ["one", "value"]}}
    wf = workflow_from_dict(data, ex.registry)
    events: list[object] = []
    result = ex.run(wf, out_dir=tmp_path, on_event=events.append)
    assert not result.ok and result.failed_node == "sum"
    assert result.nodes["sum"].status == "error"
    assert result.nodes["sum"].error["type"] == "RuntimeError"
    assert "broke on purpose" in result.nodes["sum"].error["message"]
    assert result.nodes["save"].status == "pending"  # never reached
    failed = [e for e in events if isinstance(e, NodeFailed)]
    assert failed and failed[0].node_id == "sum" and failed[0].error_type == "RuntimeError"
    assert isinstance(events[-1], RunFinished) and not events[-1].ok
    # The graph is untouched and the upstream work stays cached for the next try.
    wf.nodes["sum"].type = "Add"
    wf.nodes["sum"].inputs["b"] = wf.nodes["sum"].inputs["value"]
    wf.nodes["sum"].inputs["a"] = wf.nodes["sum"].inputs.pop("value")
    fixed = ex.run(wf, out_dir=tmp_path)
    assert fixed.ok and fixed.nodes["one"].status == "cached"


def test_cancel_stops_at_the_next_step_and_keeps_earlier_results(tmp_path: Path) -> None:
    calls, ex = _setup()
    data = chain_workflow()
    data["nodes"]["slow"] = {"type": "Steps", "params": {"steps": 500, "delay": 0.01},
                             "inputs": {"value": ["one", "value"]}}
    data["nodes"]["sum"]["inputs"]["a"] = ["slow", "value"]
    wf = workflow_from_dict(data, ex.registry)
    cancel = CancelToken()
    steps: list[int] = []

    def on_event(event: object) -> None:
        if isinstance(event, NodeProgress):
            steps.append(event.step)
            if event.step == 3:
                threading.Thread(target=cancel.cancel).start()

    result = ex.run(wf, out_dir=tmp_path, on_event=on_event, cancel=cancel)
    assert result.cancelled and not result.ok
    assert result.nodes["slow"].status == "cancelled"
    assert result.nodes["one"].status == "ran"
    assert max(steps) < 50  # stopped within a few steps, not after all 500
    assert result.nodes["save"].status == "cancelled"
    # The next run starts where it stopped: upstream is cached.
    wf.nodes["slow"].params["steps"] = 2
    again = ex.run(wf, out_dir=tmp_path)
    assert again.ok and again.nodes["one"].status == "cached" and again.nodes["slow"].status == "ran"


def test_events_carry_progress_rate_and_timings(tmp_path: Path) -> None:
    calls, ex = _setup()
    data = chain_workflow()
    data["nodes"]["slow"] = {"type": "Steps", "params": {"steps": 4, "delay": 0.0},
                             "inputs": {"value": ["one", "value"]}}
    data["nodes"]["sum"]["inputs"]["a"] = ["slow", "value"]
    wf = workflow_from_dict(data, ex.registry)
    events: list[object] = []
    ex.run(wf, out_dir=tmp_path, on_event=events.append)
    progress = [e for e in events if isinstance(e, NodeProgress)]
    assert [p.step for p in progress] == [1, 2, 3, 4] and all(p.total == 4 for p in progress)
    finished = {e.node_id: e for e in events if isinstance(e, NodeFinished)}
    assert set(finished) == {"one", "two", "slow", "sum", "text", "save"}
    assert finished["save"].files and all(e.seconds >= 0 for e in finished.values())
    events.clear()
    ex.run(wf, out_dir=tmp_path, on_event=events.append)
    assert {e.node_id for e in events if isinstance(e, NodeCached)} == set(finished)


def test_save_never_overwrites(tmp_path: Path) -> None:
    calls, ex = _setup()
    wf = workflow_from_dict(chain_workflow(), ex.registry)
    ex.run(wf, out_dir=tmp_path)
    ex.clear_cache()
    ex.run(wf, out_dir=tmp_path)
    assert sorted(p.name for p in tmp_path.glob("sum_*.txt")) == ["sum_00001.txt", "sum_00002.txt"]
