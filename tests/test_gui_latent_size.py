"""Empty Latent follows the connected model: native size by default, width/height step by its multiple."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QPointF, Qt

from pipelines.diffusion.families import FAMILIES
from pipelines.diffusion.sizes import size_for_model
from tests.gui_support import make_window


def test_the_built_in_model_is_64_pixels_and_families_know_theirs() -> None:
    size = size_for_model("builtin:shapes-sd")
    assert (size.native, size.multiple) == (64, 8)
    assert (FAMILIES["sd"].native_size, FAMILIES["sdxl"].native_size) == (512, 1024)
    assert FAMILIES["flux"].size_multiple == 16


def test_width_defaults_to_the_model_size_and_snaps_to_its_multiple(qtbot, tmp_path: Path, registry) -> None:
    window = make_window(qtbot, tmp_path, registry)
    load = window.scene.add_node("LoadDiffusionModel", QPointF(0, 0))
    latent = window.scene.add_node("EmptyLatent", QPointF(300, 0))
    assert window.scene.try_connect(load, "vae", latent, "vae")
    window.scene.clearSelection()
    window.scene.node_items[latent].setSelected(True)
    spin = window.inspector.editors["width"].editor
    assert window.model.node(latent).params["width"] == 0  # 0: the model's own size
    assert spin.text() == "model size (64)" and spin.singleStep() == 8
    # Typing 70 is not a size this model can take: it becomes the nearest multiple of 8.
    spin.setFocus()
    spin.lineEdit().selectAll()
    qtbot.keyClicks(spin, "70")
    qtbot.keyClick(spin, Qt.Key.Key_Return)
    assert window.model.node(latent).params["width"] == 72
