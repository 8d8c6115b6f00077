"""What the status bar and the docks show as run events arrive: a finished load stops counting, streamed
text brings the Output tab forward."""

from __future__ import annotations

from pathlib import Path

from app.gui.run_worker import TimedEvent
from nodes.events import NodeProgress, NodeStarted, NodeText, RunStarted
from tests.gui_support import make_window

MIB = 1024 * 1024


def test_a_finished_load_no_longer_shows_its_byte_count(qtbot, tmp_path: Path, registry) -> None:
    window = make_window(qtbot, tmp_path, registry)
    window.on_run_event(TimedEvent(0.0, RunStarted(0, ("decode",))))
    window.on_run_event(TimedEvent(0.1, NodeStarted("decode", "VAEDecode")))
    window.on_run_event(
        TimedEvent(0.2, NodeProgress("decode", MIB // 10, 3 * MIB // 10, 0.0, "load_bytes", "vae"))
    )
    assert "loading vae" in window.statusBar().currentMessage()
    window.on_run_event(
        TimedEvent(0.3, NodeProgress("decode", 3 * MIB // 10, 3 * MIB // 10, 0.0, "load_bytes", "vae"))
    )
    message = window.statusBar().currentMessage()
    assert "done" in message and "MiB" not in message and "B/s" not in message
    assert window.scene.run_states["decode"].message == ""


def test_streamed_text_brings_the_output_tab_in_front_of_the_history(qtbot, tmp_path: Path, registry) -> None:
    window = make_window(qtbot, tmp_path, registry)
    window.outputs_dock.raise_()
    qtbot.waitUntil(lambda: window.output.visibleRegion().isEmpty())
    window.on_run_event(TimedEvent(0.0, RunStarted(0, ("chat",))))
    window.on_run_event(TimedEvent(0.1, NodeText("chat", "Hello")))
    qtbot.waitUntil(lambda: not window.output.visibleRegion().isEmpty())
    assert window.output.currentIndex() == 1
