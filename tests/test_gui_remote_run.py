"""File > Connect to Server (issue 31 item 5): Run sends the open graph to `app serve`, its progress comes back
into the same docks (node states, timeline, log, output pictures); an unreachable server or a refused token
gets a clear message, and the next Run is local again after Disconnect."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from PySide6.QtWidgets import QApplication

from app.server.options import ServeOptions
from memory.config import MemoryConfig
from tests.gui_support import make_window
from tests.server_support import run_server

REPO = Path(__file__).resolve().parent.parent
TXT2IMG = REPO / "resources" / "workflows" / "txt2img.json"
TOKEN = "editor-test-token-0123456789"


def wait_until(condition, timeout: float = 60.0) -> None:
    """Process events until `condition()` holds, sleeping so the network threads get the GIL."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {condition}")
        QApplication.processEvents()
        time.sleep(0.01)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # ~0.8 s here: a window and a connection attempt
def test_an_unreachable_server_is_named_with_what_to_start(qtbot, tmp_path: Path, registry) -> None:
    window = make_window(qtbot, tmp_path, registry)
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    window.remote.connect_to(url, None)
    wait_until(lambda: window.remote.error_box is not None)
    text = window.remote.error_box.text()
    assert text.startswith(f"Cannot reach a Nodeloom server at {url}") and "app serve" in text
    assert not window.remote.connected and window.server_label.text() == ""


@pytest.mark.slow
def test_a_run_on_the_server_fills_the_docks_and_a_wrong_token_is_refused(
    qtbot, tmp_path: Path, registry
) -> None:
    options = ServeOptions(
        out_dir=tmp_path / "server-out",
        input_dir=tmp_path / "server-in",
        memory=MemoryConfig(device="cpu", data_dir=tmp_path / "memory-data"),
        token=TOKEN,
    )
    window = make_window(qtbot, tmp_path, registry, for_runs=True)
    assert window.open_path(TXT2IMG, confirm=False)
    window.model.set_param("sampler", "steps", 3)
    with run_server(options) as server:
        window.remote.connect_to(server.base, "not-the-token")
        wait_until(lambda: window.remote.error_box is not None)
        assert "refused the token (HTTP 401)" in window.remote.error_box.text()
        assert not window.remote.connected
        window.remote.connect_to(server.base, TOKEN)
        wait_until(lambda: window.remote.connected)
        assert window.server_label.text() == f"Server: {server.base}"
        assert window.run_workflow()
        assert window.runner.executor is None or not window.runner.running  # nothing ran locally
        wait_until(lambda: isinstance(window.last_result, dict), timeout=180)
    assert window.last_result["ok"], window.last_result
    states = window.scene.run_states
    assert states["sampler"].status == "done" and states["save"].status == "done"
    # The timeline got the server's nodes with their spans; the sampler's steps came as progress.
    spans = window.plots.spans
    assert {"sampler", "decode", "save"} <= set(spans) and all(
        spans[n].end is not None for n in ("sampler", "save")
    )
    # The picture came back into the output folder and the Output dock's strip, and onto the Save node.
    saved = list((tmp_path / "outputs" / "server").glob("*.png"))
    assert len(saved) == 1 and window.output.files.count() == 1
    assert window.scene.node_items["save"].thumbnail is not None
    log = window.output.log.toPlainText()
    assert f"Run on {server.base} started" in log and "finished in" in log
    window.remote.disconnect()
    assert not window.remote.connected and window.server_label.text() == ""
