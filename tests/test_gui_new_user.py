"""The new user's first graph, as the issue scripted it: File > New, add the txt2img nodes from the palette
with the words people arrive with, wire them, Run. The built-in model draws the default prompt, and the live
preview halfway through already looks like the final picture."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from PySide6.QtCore import QPointF, Qt

from app.gui.main_window import MainWindow
from nodes.events import NodePreview
from tests.gui_support import make_window
from tests.test_gui_run import wait_until
from training.shapes.evaluate import measure_scene, score
from training.shapes.scenes import parse_caption

# Integration: in `make test`, out of the fast lane (`make test-fast`).
pytestmark = pytest.mark.slow

PROMPT = "a small yellow triangle on a black background"


def add_from_palette(qtbot, window: MainWindow, words: str, x: float, y: float) -> str:
    """Tab on the canvas, type the words, Enter: the id of the node that appeared."""
    before = set(window.model.node_ids())
    window.view.setFocus()
    window.view.cursor_scene_pos = lambda: QPointF(x, y)  # type: ignore[method-assign]
    qtbot.keyClick(window.view, Qt.Key.Key_Tab)
    assert window.palette.isVisible()
    qtbot.keyClicks(window.palette.search, words)
    qtbot.keyClick(window.palette.search, Qt.Key.Key_Return)
    (new,) = set(window.model.node_ids()) - before
    return new


@pytest.mark.slow
def test_new_user_builds_txt2img_from_an_empty_canvas_and_runs_it(qtbot, tmp_path: Path, registry) -> None:
    window = make_window(qtbot, tmp_path, registry, for_runs=True)
    window.new_action.trigger()
    assert window.model.node_ids() == []

    types = {}
    for words, x, y in (
        ("checkpoint", 0, 0),
        ("clip", 300, 0),
        ("clip", 300, 160),
        ("ksampler", 600, 0),
        ("vae decode", 900, 0),
        ("save", 1200, 0),
    ):
        node = add_from_palette(qtbot, window, words, x, y)
        types.setdefault(window.model.node(node).type, []).append(node)
    assert sorted(types) == ["LoadDiffusionModel", "Sampler", "SaveImage", "TextEncode", "VAEDecode"]
    (load,), (positive, negative), (sampler,) = (
        types["LoadDiffusionModel"],
        types["TextEncode"],
        types["Sampler"],
    )
    (decode,), (save,) = types["VAEDecode"], types["SaveImage"]

    for wire in (
        (load, "text_encoder", positive, "text_encoder"),
        (load, "text_encoder", negative, "text_encoder"),
        (load, "denoiser", sampler, "denoiser"),
        (positive, "conditioning", sampler, "positive"),
        (negative, "conditioning", sampler, "negative"),
        (sampler, "latent", decode, "latent"),
        (load, "vae", decode, "vae"),
        (decode, "image", save, "image"),
    ):
        ok, why = window.scene.try_connect(*wire)
        assert ok, why
    window.model.set_param(positive, "text", PROMPT)
    window.model.set_param(negative, "text", "")

    previews: list[Image.Image] = []
    window.runner.run_event.connect(
        lambda timed: (
            previews.append(timed.event.image)
            if isinstance(timed.event, NodePreview)
            and timed.event.node_id == sampler
            and not timed.event.final
            else None
        )
    )
    qtbot.keyClick(window.view, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    wait_until(lambda: window.last_result is not None, 120)
    assert window.last_result.ok, window.last_result.error

    (png,) = (tmp_path / "outputs").glob("*.png")
    final = Image.open(png).convert("RGB")
    assert final.size == (64, 64)  # the model's own size, not 512
    checks = score(parse_caption(PROMPT), measure_scene(final))
    assert checks["background"] and checks["colour"] and checks["shape"], checks
    steps = window.model.node(sampler).params["steps"]
    assert len(previews) == steps  # one preview per step by default
    halfway = np.asarray(previews[9].convert("RGB").resize(final.size, Image.Resampling.BILINEAR), float)
    mad = np.abs(halfway - np.asarray(final, float)).mean()
    assert mad < 40, f"step-10 preview is {mad:.1f}/255 from the final picture"
