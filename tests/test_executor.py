"""The executor: order, what runs, caching across edits, failure and cancellation."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from memory import MemoryManager
from nodes.context import CancelToken
from nodes.events import NodeCached, NodeFailed, NodeFinished, NodeProgress, NodeStarted, RunFinished
from nodes.executor import Executor
from nodes.workflow import Link, NodeInstance, workflow_from_dict
from tests.nodes_for_tests import Calls, chain_workflow, make_registry


@pytest.fixture
def setup(cpu_memory: MemoryManager) -> Callable[[], tuple[Calls, Executor]]:
    def make() -> tuple[Calls, Executor]:
        calls = Calls()
        return calls, Executor(make_registry(calls), cpu_memory)

    return make


def test_runs_only_what_the_outputs_need_in_topological_order(tmp_path: Path, setup) -> None:
    calls, ex = setup()
    wf = workflow_from_dict(chain_workflow(), ex.registry)
    started: list[str] = []
    result = ex.run(
        wf,
        out_dir=tmp_path,
        on_event=lambda e: started.append(e.node_id) if isinstance(e, NodeStarted) else None,
    )
    assert result.ok
    assert "other" not in calls.by_node  # nothing needs it
    assert started.index("sum") > max(started.index("one"), started.index("two"))
    assert started.index("text") > started.index("sum") and started[-1] == "save"
    saved = result.nodes["save"].files
    assert len(saved) == 1 and Path(saved[0]).read_text() == "3"


def test_only_the_edited_node_and_its_descendants_rerun(tmp_path: Path, setup) -> None:
    calls, ex = setup()
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


def test_a_failing_node_stops_the_run_with_its_error(tmp_path: Path, setup) -> None:
    calls, ex = setup()
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


def test_cancel_stops_at_the_next_step_and_keeps_earlier_results(tmp_path: Path, setup) -> None:
    calls, ex = setup()
    data = chain_workflow()
    data["nodes"]["slow"] = {
        "type": "Steps",
        "params": {"steps": 500, "delay": 0.01},
        "inputs": {"value": ["one", "value"]},
    }
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


def test_events_carry_progress_rate_and_timings(tmp_path: Path, setup) -> None:
    calls, ex = setup()
    data = chain_workflow()
    data["nodes"]["slow"] = {
        "type": "Steps",
        "params": {"steps": 4, "delay": 0.0},
        "inputs": {"value": ["one", "value"]},
    }
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


def test_save_never_overwrites(tmp_path: Path, setup) -> None:
    calls, ex = setup()
    wf = workflow_from_dict(chain_workflow(), ex.registry)
    ex.run(wf, out_dir=tmp_path)
    ex.clear_cache()
    ex.run(wf, out_dir=tmp_path)
    assert sorted(p.name for p in tmp_path.glob("sum_*.txt")) == ["sum_00001.txt", "sum_00002.txt"]


def test_a_wired_value_gets_the_parameter_checks(tmp_path: Path, setup) -> None:
    calls, ex = setup()
    data = chain_workflow()
    data["nodes"]["steps"] = {
        "type": "Steps",
        "params": {"delay": 0.0},
        "inputs": {"value": ["one", "value"], "steps": ["sum", "value"]},
    }
    data["nodes"]["sum"]["inputs"] = {"a": ["one", "value"], "b": ["big", "value"]}
    data["nodes"]["big"] = {"type": "Number", "params": {"value": 100}}
    data["nodes"]["neg"] = {"type": "Int", "params": {"value": -5}}
    data["nodes"]["steps"]["inputs"]["steps"] = ["neg", "value"]
    data["nodes"]["save"]["inputs"]["text"] = ["text", "text"]
    data["nodes"]["text"]["inputs"]["value"] = ["steps", "value"]
    wf = workflow_from_dict(data, ex.registry)
    result = ex.run(wf, out_dir=tmp_path)
    assert not result.ok and result.failed_node == "steps"
    message = result.nodes["steps"].error["message"]
    assert "'steps'" in message and "below the minimum 1" in message
    assert "steps" not in calls.by_node  # refused before it ran


def test_output_nodes_rerun_for_a_new_output_folder_and_cached_ones_keep_their_files(
    tmp_path: Path, setup
) -> None:
    calls, ex = setup()
    wf = workflow_from_dict(chain_workflow(), ex.registry)
    first = ex.run(wf, out_dir=tmp_path / "a")
    again = ex.run(wf, out_dir=tmp_path / "a")
    assert again.nodes["save"].status == "cached"
    assert again.nodes["save"].files == first.nodes["save"].files  # the report still names the file
    elsewhere = ex.run(wf, out_dir=tmp_path / "b")
    assert elsewhere.nodes["save"].status == "ran" and elsewhere.nodes["sum"].status == "cached"
    assert len(list((tmp_path / "b").glob("sum_*.txt"))) == 1


def test_a_file_changed_on_disk_invalidates_the_node_that_reads_it(tmp_path: Path, setup) -> None:
    from PIL import Image

    calls, ex = setup()
    image = tmp_path / "in.png"
    Image.new("RGB", (4, 4), (10, 20, 30)).save(image)
    data = {
        "format": "nodeloom.workflow",
        "version": 1,
        "nodes": {
            "img": {"type": "LoadImage", "params": {"path": str(image)}},
            "save": {"type": "SaveImage", "params": {"prefix": "x"}, "inputs": {"image": ["img", "image"]}},
        },
    }
    wf = workflow_from_dict(data, ex.registry)
    ex.run(wf, out_dir=tmp_path / "o")
    assert ex.run(wf, out_dir=tmp_path / "o").nodes["img"].status == "cached"
    Image.new("RGB", (5, 4), (90, 20, 30)).save(image)
    assert ex.run(wf, out_dir=tmp_path / "o").nodes["img"].status == "ran"


def test_deleted_nodes_leave_the_cache(tmp_path: Path, setup) -> None:
    calls, ex = setup()
    wf = workflow_from_dict(chain_workflow(), ex.registry)
    ex.run(wf, out_dir=tmp_path)
    del wf.nodes["save"]
    wf.nodes["show"] = NodeInstance("show", "ShowText", {}, {"text": Link("text", "text")})
    ex.run(wf, out_dir=tmp_path)
    assert "save" not in ex.cached_node_ids(wf) and "save" not in ex._cache


def test_an_out_of_memory_node_is_retried_once_under_a_stricter_policy(tmp_path: Path) -> None:
    from memory import BudgetExceeded, MemoryConfig, MemoryManager

    calls = Calls()
    registry = make_registry(calls)
    attempts: list[str] = []

    def hungry(ctx, value: int) -> dict:
        attempts.append(ctx.memory.policy.name)
        if len(attempts) == 1:
            raise BudgetExceeded("activations", 10 * 2**30, 2**30, ctx.memory.ledger_text())
        return {"value": value}

    from nodes.spec import Input, NodeSpec, Output
    from nodes.types import INT

    registry.register(
        NodeSpec(
            type="Hungry",
            title="Hungry",
            category="test",
            run=hungry,
            inputs=[Input("value", INT)],
            outputs=[Output("value", INT)],
        )
    )
    memory = MemoryManager(MemoryConfig(device="cpu", policy="none"))
    ex = Executor(registry, memory)
    data = chain_workflow()
    data["nodes"]["sum"]["inputs"]["a"] = ["hungry", "value"]
    data["nodes"]["hungry"] = {"type": "Hungry", "inputs": {"value": ["one", "value"]}}
    wf = workflow_from_dict(data, registry)
    result = ex.run(wf, out_dir=tmp_path)
    assert result.ok and attempts == ["none", "auto"]
    # The next run starts from the configured policy again.
    wf.nodes["one"].params["value"] = 3
    attempts.clear()
    ex.run(wf, out_dir=tmp_path)
    assert attempts == ["none", "auto"]
    memory.close()


def test_a_budget_error_shows_the_ledger_once(tmp_path: Path) -> None:
    from memory import BudgetExceeded, MemoryConfig, MemoryManager
    from nodes.spec import Input, NodeSpec, Output
    from nodes.types import INT

    registry = make_registry(Calls())

    def hungry(ctx, value: int) -> dict:
        raise BudgetExceeded("activations", 10 * 2**30, 2**30, ctx.memory.ledger_text())

    registry.register(
        NodeSpec(
            type="Hungry",
            title="Hungry",
            category="test",
            run=hungry,
            inputs=[Input("value", INT)],
            outputs=[Output("value", INT)],
        )
    )
    data = chain_workflow()
    data["nodes"]["sum"]["inputs"]["a"] = ["hungry", "value"]
    data["nodes"]["hungry"] = {"type": "Hungry", "inputs": {"value": ["one", "value"]}}
    with MemoryManager(MemoryConfig(device="cpu", policy="stream", data_dir=tmp_path)) as memory:
        result = Executor(registry, memory).run(workflow_from_dict(data, registry), out_dir=tmp_path)
    assert not result.ok and result.failed_node == "hungry"
    message = result.nodes["hungry"].error["message"]
    assert "activations needs 10.00 GiB" in message
    assert message.count("memory policy:") == 1 and message.count("of budget") == 1
