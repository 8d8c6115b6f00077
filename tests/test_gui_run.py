"""Running from the window: the demo workflow finishes with node states, outputs and live plots; Esc
cancels mid-run and leaves the graph as it was; a failing node is shown; a second run uses the cache."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QApplication

from app.gui.main_window import MainWindow
from app.gui.settings import AppSettings
from nodes.workflow import workflow_from_dict
from tests import gui_support
from tests.nodes_for_tests import Calls, make_registry

# Integration: in `make test`, out of the fast lane (`make test-fast`).
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
TEXT_DEMO = REPO / "resources" / "workflows" / "text_demo.json"


def make_window(qtbot, tmp_path: Path, registry, plots: bool = False) -> MainWindow:
    return gui_support.make_window(qtbot, tmp_path, registry, for_runs=True, plots=plots)


def wait_until(condition, timeout: float = 30.0) -> None:
    """Process events until `condition()` holds. Unlike qtbot.waitUntil (QTest.qWait, which keeps the GIL
    in PySide6), this sleeps between rounds so the run's worker thread gets the interpreter."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {condition}")
        QApplication.processEvents()
        time.sleep(0.01)


@pytest.fixture
def test_registry():
    return make_registry(Calls())


def slow_graph(window: MainWindow, steps: int = 400, delay: float = 0.01) -> None:
    window.model.load(
        workflow_from_dict(
            {
                "format": "nodeloom.workflow",
                "version": 1,
                "nodes": {
                    "number": {"type": "Number", "params": {"value": 3}},
                    "slow": {
                        "type": "Steps",
                        "params": {"steps": steps, "delay": delay},
                        "inputs": {"value": ["number", "value"]},
                    },
                    "text": {
                        "type": "ToText",
                        "params": {"style": "dec"},
                        "inputs": {"value": ["slow", "value"]},
                    },
                    "save": {
                        "type": "SaveText",
                        "params": {"prefix": "slow"},
                        "inputs": {"text": ["text", "text"]},
                    },
                },
                "ui": {
                    "nodes": {
                        "number": {"pos": [0, 0]},
                        "slow": {"pos": [260, 0]},
                        "text": {"pos": [520, 0]},
                        "save": {"pos": [780, 0]},
                    }
                },
            },
            window.registry,
        )
    )


def test_run_the_demo_from_the_window(qtbot, tmp_path: Path, registry) -> None:
    window = make_window(qtbot, tmp_path, registry, plots=True)
    assert window.open_path(TEXT_DEMO)
    qtbot.keyClick(window.view, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)  # Ctrl+Enter
    assert "Run started" in window.output.log.toPlainText()
    wait_until(lambda: window.last_result is not None, 30)
    assert window.last_result.ok
    states = {nid: s.status for nid, s in window.scene.run_states.items()}
    assert states == {"name": "done", "greeting": "done", "save": "done", "show": "done"}
    assert window.scene.node_items["save"].toolTip().count("Ran in") == 1
    assert window.output.text_by_node["show"] == "Hello from Nodeloom!"
    assert list((tmp_path / "outputs").glob("greeting*.txt"))
    assert window.statusBar().currentMessage().startswith("Done in")
    assert window.run_action.isEnabled() and not window.cancel_action.isEnabled()
    # The memory plot got live samples during the run; the timeline has one bar per node.
    wait_until(lambda: window.plots.sample_count > 0, 5)
    assert set(window.plots.spans) == {"name", "greeting", "save", "show"}
    # Selecting a node shows what its run did, including the memory it peaked at.
    window.scene.clearSelection()
    window.scene.node_items["greeting"].setSelected(True)
    facts = window.inspector.info_label.text()
    assert facts.startswith("Last run:") and "peak memory" in facts
    # Run again: nothing changed, so every node comes from the cache.
    window.last_result = None
    window.run_workflow()
    wait_until(lambda: window.last_result is not None and not window.runner.running, 30)
    assert {s.status for s in window.scene.run_states.values()} == {"cached"}


def test_progress_then_cancel_with_escape_leaves_the_graph_intact(
    qtbot, tmp_path: Path, test_registry
) -> None:
    window = make_window(qtbot, tmp_path, test_registry)
    slow_graph(window)
    before = window.model.to_workflow().to_dict()
    assert window.run_workflow()
    wait_until(lambda: window.scene.run_states["slow"].step >= 3, 20)
    assert window.scene.run_states["slow"].status == "running"
    assert window.scene.run_states["save"].status == "queued"
    assert window.cancel_action.isEnabled()
    qtbot.keyClick(window, Qt.Key.Key_Escape)
    wait_until(lambda: window.last_result is not None, 20)
    assert window.last_result.cancelled
    assert window.scene.run_states["slow"].status == "cancelled"
    assert window.model.to_workflow().to_dict() == before
    assert window.statusBar().currentMessage().startswith("Run cancelled")
    assert window.run_action.isEnabled()
    # The plots saw the step timings while it ran.
    assert len(window.plots.steps.get("step", [])) >= 3


def test_a_failing_node_is_highlighted_selected_and_explained(qtbot, tmp_path: Path, test_registry) -> None:
    window = make_window(qtbot, tmp_path, test_registry)
    window.model.load(
        workflow_from_dict(
            {
                "format": "nodeloom.workflow",
                "version": 1,
                "nodes": {
                    "number": {"type": "Number", "params": {"value": 1}},
                    "boom": {"type": "Boom", "inputs": {"value": ["number", "value"]}},
                },
            },
            test_registry,
        )
    )
    window.run_workflow()
    wait_until(lambda: window.last_result is not None, 20)
    state = window.scene.run_states["boom"]
    assert state.status == "error" and "the node broke on purpose" in state.message
    assert window.scene.selected_node_ids() == ["boom"]
    assert "the node broke on purpose" in window.scene.node_items["boom"].toolTip()
    message = window.statusBar().currentMessage()
    assert "boom" in message and "the node broke on purpose" in message


def test_an_incomplete_graph_is_not_run_and_says_why(qtbot, tmp_path: Path, registry) -> None:
    window = make_window(qtbot, tmp_path, registry)
    window.model.add_node("SaveText", (0, 0))
    assert not window.run_workflow()
    assert not window.runner.running
    assert "required input 'text'" in window.problem_dialog.informativeText()
    assert window.scene.run_states["save_text"].status == "error"


def test_streamed_text_arrives_token_by_token_and_edits_clear_stale_badges(qtbot, tmp_path: Path) -> None:
    from nodes.spec import NodeSpec, Output, Param
    from nodes.types import TEXT

    registry = make_registry(Calls())
    # The node holds after its second word until the test has looked: "still running" must not depend on
    # how quickly a loaded machine schedules the GUI thread against the run thread.
    release = threading.Event()

    def stream(ctx, words: str) -> dict:
        for i, word in enumerate(words.split()):
            if i == 2:
                release.wait(10)
            time.sleep(0.05)
            ctx.text(("" if i == 0 else " ") + word)
        return {"text": words}

    registry.register(
        NodeSpec(
            type="Stream",
            title="Stream",
            category="test",
            run=stream,
            is_output=True,
            params=[Param("words", "string", default="one two three four")],
            outputs=[Output("text", TEXT)],
        )
    )
    window = make_window(qtbot, tmp_path, registry)
    node = window.model.add_node("Stream", (0, 0))
    window.run_workflow()
    wait_until(lambda: window.output.text_by_node.get(node, "").startswith("one two"), 10)
    assert window.runner.running  # the first tokens show while the node still runs
    assert window.output.currentIndex() == 1  # the Text tab came forward
    release.set()
    wait_until(lambda: window.last_result is not None, 10)
    assert window.output.text_by_node[node] == "one two three four"
    assert window.scene.run_states[node].status == "done"
    window.scene.clearSelection()
    window.scene.node_items[node].setSelected(True)
    window.inspector.editors["words"].editor.setText("five six")
    window.inspector.editors["words"].editor.editingFinished.emit()
    wait_until(lambda: window.scene.run_states[node].status == "", 5)


def test_one_executor_across_runs_until_the_device_settings_change(
    qtbot, tmp_path: Path, registry, monkeypatch
) -> None:
    from app.gui.settings import SettingsDialog

    window = make_window(qtbot, tmp_path, registry)
    assert window.open_path(TEXT_DEMO)
    window.run_workflow()
    wait_until(lambda: window.last_result is not None, 30)
    executor = window.runner.executor
    window.last_result = None
    window.run_workflow()
    wait_until(lambda: window.last_result is not None and not window.runner.running, 30)
    assert window.runner.executor is executor  # same cache
    # Settings dialog: a new policy and budget are saved and the executor is rebuilt.
    monkeypatch.setattr(
        SettingsDialog,
        "exec",
        lambda self: (self.policy.setCurrentText("sequential"), self.ram.setText("2GiB"), self.accept(), 1)[
            -1
        ],
    )
    window.open_settings()
    assert window.settings.memory.policy == "sequential" and window.settings.memory.ram_budget == "2GiB"
    reread = AppSettings(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
    assert reread.memory.policy == "sequential"  # persisted
    assert window.runner.executor is not executor
    assert window.runner.memory.policy.name == "sequential"


def test_the_allow_pickle_setting_reaches_the_executor(
    qtbot, tmp_path: Path, test_registry, monkeypatch
) -> None:
    from app.gui.settings import SettingsDialog

    window = make_window(qtbot, tmp_path, test_registry)
    assert window.start_memory_manager()
    executor = window.runner.executor
    assert executor.allow_pickle is False  # off unless the user opts in
    monkeypatch.setattr(
        SettingsDialog, "exec", lambda self: (self.allow_pickle.setChecked(True), self.accept(), 1)[-1]
    )
    window.open_settings()
    reread = AppSettings(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
    assert reread.allow_pickle  # persisted
    # The device settings did not change, so the executor is kept and only its pickle rule is updated.
    assert window.runner.executor is executor and executor.allow_pickle is True


def test_closing_mid_run_leaves_the_memory_manager_to_the_worker(
    qtbot, tmp_path: Path, test_registry
) -> None:
    window = make_window(qtbot, tmp_path, test_registry)
    slow_graph(window)
    assert window.run_workflow()
    wait_until(lambda: window.scene.run_states["slow"].step >= 1, 20)
    memory = window.runner.memory
    closed_on: list[str] = []
    original = memory.close

    def recording_close() -> None:
        closed_on.append(threading.current_thread().name)
        original()

    memory.close = recording_close
    window.runner.close()  # while the worker is inside the slow node
    assert window.runner.memory is None
    wait_until(lambda: bool(closed_on), 20)
    # Closed once, by the worker after its run returned, never from the GUI thread under a running node.
    assert closed_on == ["nodeloom-run"]
    wait_until(lambda: window.last_result is not None, 20)
    assert window.last_result.cancelled


def test_the_txt2img_demo_draws_previews_then_the_picture(qtbot, tmp_path: Path, registry) -> None:
    from pipelines.paths import ModelNotFoundError, resolve_model_path

    window = make_window(qtbot, tmp_path, registry, plots=True)
    assert window.open_path(REPO / "resources" / "workflows" / "txt2img.json")
    try:
        complete = (
            resolve_model_path(window.model.node("load").params["path"]) / "model_index.json"
        ).exists()
    except ModelNotFoundError:
        complete = False
    if not complete:  # the trained shapes model is not in this checkout: same graph, tiny random model
        window.model.set_param("load", "path", "demo:tiny-sd")
    window.model.set_param("sampler", "steps", 4)
    window.model.set_param("sampler", "preview_every", 1)
    window.run_workflow()
    wait_until(lambda: window.last_result is not None, 240)
    assert window.last_result.ok, window.last_result.error
    assert window.output.previews >= 1  # live latent previews while sampling
    assert window.output.files.count() == 1 and window.output.view.pixmap() is not None
    assert window.output.caption.text().startswith("save: txt2img")
    assert {s.status for s in window.scene.run_states.values()} == {"done"}
    assert len(window.plots.steps.get("sampler_step", [])) == 4
    assert any(span.loads for span in window.plots.spans.values())  # model loads on the timeline
