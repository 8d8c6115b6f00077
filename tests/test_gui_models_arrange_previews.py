"""Issue 29, editor: a models folder in Settings (the same saved roots `app models add-root` edits) and the
model picker listing what it finds by kind and family; Arrange for the graph or a selection, one undo step;
Preview Image pictures in the Output dock's strip beside the saved ones."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QPointF
from PySide6.QtWidgets import QApplication
from safetensors.numpy import save_file

from app.gui.settings import SettingsDialog
from pipelines.models_library import load_saved_roots
from tests.gui_support import make_window

REPO = Path(__file__).resolve().parent.parent
TXT2IMG = REPO / "resources" / "workflows" / "txt2img.json"


def checkpoint(path: Path, keys: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: np.zeros(2, np.float32) for k in keys}, str(path))


@pytest.fixture
def models(tmp_path: Path) -> Path:
    """A ComfyUI-style folder: an SD1.5-shaped and an SDXL-shaped checkpoint (headers only) and a LoRA."""
    root = tmp_path / "my-models"
    unet = "model.diffusion_model.input_blocks.0.0.weight"
    checkpoint(root / "checkpoints/dream.safetensors", [unet, "cond_stage_model.transformer.text_model.x"])
    checkpoint(root / "checkpoints/xl/juggernaut.safetensors", [unet, "conditioner.embedders.1.model.x"])
    checkpoint(root / "loras/detail.safetensors", ["lora_unet_down.lora_up.weight"])
    return root


@pytest.mark.slow  # ~0.9 s here: a window and a dialog
def test_a_models_folder_added_in_settings_fills_the_picker_by_kind_and_family(
    qtbot, tmp_path: Path, registry, models: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    window = make_window(qtbot, tmp_path, registry)
    assert window.open_path(TXT2IMG, confirm=False)
    before = load_saved_roots()
    seen: dict[str, str] = {}

    def add_and_accept(
        dialog: SettingsDialog,
    ) -> int:  # what a user does in the dialog, without its modal loop
        assert dialog.models.add_folder(models)
        seen["found"] = dialog.models.found.text()
        dialog.accept()
        return 1

    monkeypatch.setattr(SettingsDialog, "exec", add_and_accept)
    window.open_settings()
    assert seen["found"] == "Found 3 model(s): checkpoints 2 (sd 1, sdxl 1); loras 1 (lora 1)"
    # Saved where `app models add-root` saves, and the window's library has it now.
    assert load_saved_roots() == [*before, models.resolve()]
    assert models.resolve() in window.library.roots
    window.scene.clearSelection()
    window.scene.node_items["load"].setSelected(True)
    choices = {c.name: c.detail for c in window.inspector.editors["path"].picker.choices}
    assert choices["dream.safetensors"] == "checkpoints · sd"
    assert choices["xl/juggernaut.safetensors"] == "checkpoints · sdxl"
    assert "detail.safetensors" not in choices  # a LoRA is not a checkpoint

    # Removing it again (the dialog's Remove) takes it out of the saved list and the library.
    def remove_and_accept(dialog: SettingsDialog) -> int:
        for i in range(dialog.models.list.count()):
            item = dialog.models.list.item(i)
            item.setSelected(item.text() == str(models.resolve()))
        dialog.models.remove_selected()
        dialog.accept()
        return 1

    monkeypatch.setattr(SettingsDialog, "exec", remove_and_accept)
    window.open_settings()
    assert load_saved_roots() == before and models.resolve() not in window.library.roots


@pytest.mark.slow  # ~0.6 s here
def test_arrange_lays_out_by_data_flow_and_undoes_in_one_step(qtbot, tmp_path: Path, registry) -> None:
    window = make_window(qtbot, tmp_path, registry)
    assert window.open_path(TXT2IMG, confirm=False)
    model = window.model
    for nid in model.node_ids():  # every node stacked on one spot, as a position-less import gives them
        model.move({nid: (100.0, 100.0)}, {})
    stacked = {nid: model.pos(nid) for nid in model.node_ids()}
    window.arrange_action.trigger()
    pos = {nid: model.pos(nid) for nid in model.node_ids()}
    # Left to right by data flow: each node right of what feeds it; no two nodes overlap.
    for nid in model.node_ids():
        for link in model.node(nid).inputs.values():
            assert pos[link.node][0] < pos[nid][0], (link.node, nid)
    rects = {nid: window.scene.node_items[nid].sceneBoundingRect() for nid in model.node_ids()}
    ids = list(rects)
    assert not any(rects[a].intersects(rects[b]) for i, a in enumerate(ids) for b in ids[i + 1 :])
    assert min(x for x, _ in pos.values()) == 100.0 and min(y for _, y in pos.values()) == 100.0  # in place
    # The first source stays at the block's top-left corner; every other node moved.
    assert window.undo_stack.undoText() == f"Arrange {len(ids) - 1} nodes"
    window.undo_stack.undo()
    assert {nid: model.pos(nid) for nid in model.node_ids()} == stacked
    # A selection: only the selected nodes move.
    window.undo_stack.redo()
    arranged = {nid: model.pos(nid) for nid in model.node_ids()}
    model.move({"decode": (900.0, 900.0), "save": (900.0, 900.0)}, {})
    window.scene.clearSelection()
    for nid in ("decode", "save"):
        window.scene.node_items[nid].setSelected(True)
    window.arrange_action.trigger()
    assert model.pos("decode")[0] < model.pos("save")[0] and model.pos("decode") == (900.0, 900.0)
    assert all(model.pos(n) == arranged[n] for n in model.node_ids() if n not in ("decode", "save"))
    assert window.undo_stack.undoText() == "Arrange 1 node"  # decode stayed where the block starts


@pytest.mark.slow
def test_a_preview_image_picture_joins_the_output_strip(qtbot, tmp_path: Path, registry) -> None:
    window = make_window(qtbot, tmp_path, registry, for_runs=True)
    scene = window.scene
    load = scene.add_node("LoadImage", QPointF(0, 0))
    window.model.set_param(load, "path", "builtin:shapes_sample.png")
    preview = scene.add_node("PreviewImage", QPointF(300, 0))
    save = scene.add_node("SaveImage", QPointF(300, 300))
    assert scene.try_connect(load, "image", preview, "image")
    assert scene.try_connect(load, "image", save, "image")
    assert window.run_workflow()
    deadline = time.monotonic() + 60
    while (window.runner.running or window.last_result is None) and time.monotonic() < deadline:
        QApplication.processEvents()
        time.sleep(0.01)
    assert window.last_result.ok, window.last_result.error
    strip = window.output.files
    tips = sorted(strip.item(i).toolTip().splitlines()[0] for i in range(strip.count()))
    assert strip.count() == 2, tips  # the saved file once, and the preview (it has no file)
    assert f"{preview}: preview 64×64 (not saved)" in tips and any(t.endswith(".png") for t in tips)
    assert window.output.caption.text().startswith(f"{save}: ")  # the saved picture stays the result
    item = next(strip.item(i) for i in range(strip.count()) if strip.item(i).toolTip().startswith(preview))
    strip.itemClicked.emit(item)
    assert window.output.caption.text() == f"{preview}: preview 64×64"
