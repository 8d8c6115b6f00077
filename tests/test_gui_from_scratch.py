"""A graph built from the palette the ComfyUI way: Empty Latent's model inputs left unwired, a leftover node
that feeds nothing. It runs at the model's own size, says which size and why, and skips the leftover."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from PySide6.QtCore import QPointF
from PySide6.QtWidgets import QApplication, QMessageBox

from app.gui.main_window import MainWindow
from app.gui.node_item import format_value
from tests.gui_support import make_window

pytestmark = pytest.mark.slow  # runs the built-in model (about a second)


def wait_until(condition, timeout: float = 60.0) -> None:
    """Process events until `condition()` holds; sleeps between rounds so the run thread gets the GIL."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {condition}")
        QApplication.processEvents()
        time.sleep(0.01)


def build_comfy_style(window: MainWindow) -> dict[str, str]:
    """Load Checkpoint, two Text Encodes, Empty Latent, Sampler, VAE Decode, Save Image, wired as in ComfyUI."""
    scene = window.scene
    ids = {
        name: scene.add_node(kind, QPointF(x, y))
        for name, kind, x, y in (
            ("load", "LoadDiffusionModel", 0, 0),
            ("pos", "TextEncode", 300, 0),
            ("neg", "TextEncode", 300, 250),
            ("latent", "EmptyLatent", 300, 500),
            ("sampler", "Sampler", 600, 0),
            ("decode", "VAEDecode", 900, 0),
            ("save", "SaveImage", 1150, 0),
        )
    }
    for out_node, out_port, in_node, in_port in (
        ("load", "text_encoder", "pos", "text_encoder"),
        ("load", "text_encoder", "neg", "text_encoder"),
        ("load", "denoiser", "sampler", "denoiser"),
        ("pos", "conditioning", "sampler", "positive"),
        ("neg", "conditioning", "sampler", "negative"),
        ("latent", "latent", "sampler", "latent"),
        ("sampler", "latent", "decode", "latent"),
        ("load", "vae", "decode", "vae"),
        ("decode", "image", "save", "image"),
    ):
        assert scene.try_connect(ids[out_node], out_port, ids[in_node], in_port), (out_node, in_node)
    window.model.set_param(ids["pos"], "text", "a small yellow triangle")
    window.model.set_param(ids["sampler"], "steps", 2)
    return ids


def run_and_wait(window: MainWindow) -> None:
    assert window.run_workflow()
    wait_until(lambda: not window.runner.running and window.last_result is not None)


def test_a_from_scratch_graph_samples_at_the_model_size_and_says_so(qtbot, tmp_path: Path, registry) -> None:
    window = make_window(qtbot, tmp_path, registry, for_runs=True)
    ids = build_comfy_style(window)
    window.scene.clearSelection()
    window.scene.node_items[ids["latent"]].setSelected(True)
    # The inspector already knows the size the sampler's model gives (the built-in model: 64 px).
    assert window.inspector.editors["width"].editor.text() == "model size (64)"
    width = window.registry["EmptyLatent"].param("width")
    assert (
        format_value(width, window.model.node(ids["latent"]).params["width"]) == "model size"
    )  # on the node
    run_and_wait(window)
    result = window.last_result
    assert result.ok, result.error
    image = result.outputs[ids["decode"]]["image"]
    assert tuple(image.shape[-3:-1]) == (64, 64), image.shape  # (B, H, W, C)
    log = window.output.log.toPlainText()
    assert f"{ids['latent']}: 64x64 px: the native size of the denoiser" in log
    # The graph the user built is unchanged: no wire was added to the Empty Latent.
    assert window.model.node(ids["latent"]).inputs == {}


def test_a_leftover_node_is_skipped_and_marked_not_a_refusal(
    qtbot, tmp_path: Path, registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    window = make_window(qtbot, tmp_path, registry, for_runs=True)
    ids = build_comfy_style(window)
    leftover = window.scene.add_node("TextEncode", QPointF(300, 800))  # nothing wired in, feeds nothing
    refused: list[str] = []
    monkeypatch.setattr(window, "show_problems", lambda *a, **k: refused.append(str(a)))
    monkeypatch.setattr(QMessageBox, "critical", lambda *a, **k: refused.append(str(a)))
    run_and_wait(window)
    assert refused == []
    assert window.last_result.ok, window.last_result.error
    assert leftover not in window.last_result.nodes
    assert window.scene.run_states[leftover].status == "skipped"
    assert window.scene.node_items[leftover].badge()[0] == "skipped"
    assert f"{leftover} (Text Encode)" in window.output.log.toPlainText()
    # A missing input on a node an output needs is still refused.
    window.model.disconnect(ids["pos"], "text_encoder")
    assert not window.run_workflow()
    assert any("text_encoder" in r for r in refused)
