"""Run queue, seed control after each run, and the output history across restarts."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPointF
from PySide6.QtWidgets import QComboBox

from app.gui.history import HISTORY_MIME, read_history
from app.gui.main_window import MainWindow
from nodes.workflow import workflow_from_dict
from tests import gui_support
from tests.nodes_for_tests import Calls, make_registry
from tests.test_gui_run import wait_until

# Integration: in `make test`, out of the fast lane (`make test-fast`).
pytestmark = pytest.mark.slow


@pytest.fixture
def test_registry():
    return make_registry(Calls())


def seeded_graph(window: MainWindow, delay: float) -> None:
    window.model.load(
        workflow_from_dict(
            {
                "format": "nodeloom.workflow",
                "version": 1,
                "nodes": {
                    "seed": {"type": "Seed", "params": {"seed": 5}},
                    "slow": {
                        "type": "Steps",
                        "params": {"steps": 30, "delay": delay},
                        "inputs": {"value": ["seed", "seed"]},
                    },
                    "text": {
                        "type": "ToText",
                        "params": {"style": "dec"},
                        "inputs": {"value": ["slow", "value"]},
                    },
                    "save": {
                        "type": "SaveText",
                        "params": {"prefix": "seed"},
                        "inputs": {"text": ["text", "text"]},
                    },
                },
            },
            window.registry,
        )
    )


def written_seeds(out: Path) -> list[str]:
    return sorted(p.read_text() for p in out.glob("seed*.txt"))


def test_run_while_running_queues_with_increment_seeds(qtbot, tmp_path: Path, test_registry) -> None:
    window = gui_support.make_window(qtbot, tmp_path, test_registry, for_runs=True)
    seeded_graph(window, delay=0.02)
    window.scene.node_items["seed"].setSelected(True)
    combo = window.inspector.findChild(QComboBox, "seedControl")
    combo.setCurrentIndex(combo.findData("increment"))
    assert window.model.to_workflow().ui["nodes"]["seed"]["seed_control"] == {"seed": "increment"}
    assert window.run_workflow()
    assert window.model.node("seed").params["seed"] == 6  # incremented once the run is queued
    assert window.run_action.isEnabled()
    assert window.run_workflow() and window.run_workflow()  # two more while the first runs: queued
    assert len(window.queue.jobs) == 2 and window.queue.list.count() == 2
    # The queue is editable: drop the last one.
    window.queue.list.setCurrentRow(1)
    window.queue.remove_selected()
    assert len(window.queue.jobs) == 1
    wait_until(lambda: not window.runner.running and not window.queue.jobs, 60)
    out = tmp_path / "outputs"
    assert written_seeds(out) == ["5", "6"]  # each run used the seed the graph had when it was queued
    assert window.model.node("seed").params["seed"] == 8


def test_the_output_history_survives_a_restart_and_reopens_the_graph(
    qtbot, tmp_path: Path, test_registry
) -> None:
    window = gui_support.make_window(qtbot, tmp_path, test_registry, for_runs=True)
    seeded_graph(window, delay=0.0)
    assert window.run_workflow()
    wait_until(lambda: window.last_result is not None and not window.runner.running, 30)
    (entry,) = read_history(tmp_path / "outputs")
    assert entry.seeds == {"seed.seed": 5} and entry.report["ok"]
    assert entry.files and Path(entry.files[0]).name.startswith("seed")
    window.close()

    again = gui_support.make_window(qtbot, tmp_path, test_registry, for_runs=True)  # same settings folder
    assert again.history_panel.list.count() == 1
    assert again.model.node_ids() == []
    again.history_panel._reopen(again.history_panel.list.item(0))
    assert sorted(again.model.node_ids()) == ["save", "seed", "slow", "text"]
    assert again.model.node("seed").params["seed"] == 5


def test_a_history_picture_dropped_on_the_canvas_becomes_a_load_image(
    qtbot, tmp_path: Path, registry
) -> None:
    window = gui_support.make_window(qtbot, tmp_path, registry)
    picture = str(Path(__file__).resolve().parent.parent / "resources" / "images" / "shapes_sample.png")
    data = QMimeData()
    data.setData(HISTORY_MIME, picture.encode())
    node = window.drop_history_picture(picture, QPointF(0, 0))
    assert window.model.node(node).type == "LoadImage" and window.model.node(node).params["path"] == picture
    # Dropped onto an existing Load Image: that node takes the picture.
    window.model.set_param(node, "path", "")
    target = window.scene.node_items[node].sceneBoundingRect().center()
    assert window.drop_history_picture(picture, target) == node
    assert window.model.node(node).params["path"] == picture
    assert len(window.model.node_ids()) == 1
