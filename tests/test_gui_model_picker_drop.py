"""The model picker on loader fields (the models library, filtered as you type) and files dropped on the
window (workflows open or import, pictures become Load Image, weights become the loader that takes them)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication
from safetensors.numpy import save_file

from app.gui.main_window import MainWindow
from nodes.workflow import load_workflow
from pipelines.models_library import ModelsLibrary
from tests import gui_support

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def models(tmp_path: Path) -> Path:
    """A ComfyUI-style models folder: two checkpoints, a LoRA, a VAE and a file that is no model."""
    root = tmp_path / "models"
    for name in ("checkpoints/sd15/DreamShaper_8.safetensors", "checkpoints/realisticVision.safetensors"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        save_file({"model.diffusion_model.w": np.zeros(2, np.float32)}, str(root / name))
    (root / "loras").mkdir()
    save_file(
        {"lora_unet_down.lora_up.weight": np.zeros(2, np.float32)}, str(root / "loras/detail.safetensors")
    )
    (root / "vae").mkdir()
    save_file({"decoder.w": np.zeros(2, np.float32)}, str(root / "vae/kl-f8.safetensors"))
    (root / "checkpoints/readme.txt").write_text("not a model")
    (root / "controlnet/canny").mkdir(parents=True)  # a diffusers-style ControlNet folder
    (root / "controlnet/canny/config.json").write_text("{}")
    save_file(
        {"w": np.zeros(2, np.float32)}, str(root / "controlnet/canny/diffusion_pytorch_model.safetensors")
    )
    return root


@pytest.fixture
def window(qtbot, tmp_path: Path, registry, models: Path) -> MainWindow:
    win = gui_support.make_window(qtbot, tmp_path, registry)
    win.library = ModelsLibrary([models])  # as `app --models-dir DIR` would give it
    win.set_workflow(load_workflow(REPO / "resources/workflows/txt2img.json", registry), None)
    return win


def test_the_loader_field_lists_the_library_and_filters_as_you_type(
    qtbot, window: MainWindow, models: Path
) -> None:
    window.scene.clearSelection()
    window.scene.node_items["load"].setSelected(True)
    field = window.inspector.editors["path"]
    completer = field.picker
    assert completer is not None
    names = [c.name for c in completer.choices]
    # Checkpoints and the built-in model; not the LoRA, the VAE or the text file.
    demos = [
        f"demo:tiny-{n}"
        for n in (
            "sd",
            "sdxl",
            "pixart",
            "sd3",
            "flux",
            "zimage",
            "qwenimage",
            "flux2-klein",
            "flux2-dev",
            "wan",
            "wan22",
            "wan-i2v",
            "wan22-i2v",
            "wan22-ti2v",
            "wan-flf2v",
            "qwenimage-edit",
            "qwenimage-edit-2511",
            "krea2",
            "krea2-turbo",
            "ltx2",
            "minimax",
            "qwenimage21",
            "qwenimage21-turbo",
            "flux3",
        )
    ]
    assert names == [
        "builtin:shapes-sd",
        *demos,  # the shipped workflows use them
        "realisticVision.safetensors",
        "sd15/DreamShaper_8.safetensors",
    ]
    field.editor.clear()
    field.editor.setFocus()
    qtbot.keyClicks(field.editor, "dream")  # any case, anywhere in the name
    assert completer.popup().isVisible()
    assert completer.completionCount() == 1
    assert completer.currentCompletion() == str(models / "checkpoints/sd15/DreamShaper_8.safetensors")
    popup = completer.popup()
    popup.setCurrentIndex(completer.completionModel().index(0, 0))
    qtbot.keyClick(popup, Qt.Key.Key_Return)
    chosen = str(models / "checkpoints/sd15/DreamShaper_8.safetensors")
    assert window.model.node("load").params["path"] == chosen
    window.undo_stack.undo()  # one undo step, as any edit
    assert window.model.node("load").params["path"] == "builtin:shapes-sd"


def test_each_loader_lists_its_own_kind(qtbot, window: MainWindow, models: Path) -> None:
    for loader, names in (
        ("LoadLoRA", ["detail.safetensors"]),
        ("LoadVAE", ["kl-f8.safetensors"]),
        ("LoadControlNet", ["builtin:shapes-controlnet-canny", "canny"]),  # folders, not the files in them
    ):
        node = window.scene.add_node(loader, QPointF(0, 600))
        window.scene.clearSelection()
        window.scene.node_items[node].setSelected(True)
        assert [c.name for c in window.inspector.editors["path"].picker.choices] == names
    assert window.inspector.editors["path"].picker.choices[1].value == str(models / "controlnet/canny")


def drop(window: MainWindow, files: list[Path], at: QPoint) -> bool:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(f)) for f in files])
    args = (Qt.DropAction.CopyAction, mime, Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier)
    enter = QDragEnterEvent(at, *args)
    QApplication.sendEvent(window, enter)
    if not enter.isAccepted():
        return False
    QApplication.sendEvent(window, QDropEvent(QPointF(at), *args))
    return True


def test_dropped_weights_make_the_loader_that_takes_them(
    window: MainWindow, models: Path, tmp_path: Path
) -> None:
    at = window.view.mapTo(window, window.view.viewport().rect().center())
    where = window.view.mapToScene(window.view.viewport().rect().center())
    loose_lora = tmp_path / "my_style.safetensors"  # outside the library: known by its tensor names
    save_file({"lora_te_text_model.lora_down.weight": np.zeros(2, np.float32)}, str(loose_lora))
    files = [models / "vae/kl-f8.safetensors", models / "checkpoints/realisticVision.safetensors", loose_lora]
    before = set(window.model.node_ids())
    assert drop(window, files, at)
    added = [n for n in window.model.node_ids() if n not in before]
    made = {window.model.node(n).type: window.model.node(n).params["path"] for n in added}
    assert made == {
        "LoadVAE": str(files[0]),
        "LoadDiffusionModel": str(files[1]),
        "LoadLoRA": str(loose_lora),
    }
    x, y = window.model.pos(added[0])
    assert abs(x - where.x()) <= 20 and abs(y - where.y()) <= 20  # at the drop point (snapped to the grid)


def test_a_dropped_picture_makes_a_load_image_and_a_workflow_opens(
    window: MainWindow, tmp_path: Path
) -> None:
    picture = tmp_path / "photo.jpg"
    Image.new("RGB", (16, 16), "red").save(picture)
    assert drop(window, [picture], QPoint(400, 300))
    (new,) = [n for n in window.model.node_ids() if window.model.node(n).type == "LoadImage"]
    assert window.model.node(new).params["path"] == str(picture)
    plain_png = tmp_path / "plain.png"  # a PNG without a workflow is a picture too
    Image.new("RGB", (16, 16), "blue").save(plain_png)
    assert drop(window, [plain_png], QPoint(100, 100))
    assert sum(window.model.node(n).type == "LoadImage" for n in window.model.node_ids()) == 2
    window.ask_save_changes = lambda: "discard"  # type: ignore[method-assign]
    assert drop(window, [REPO / "resources/workflows/text_demo.json"], QPoint(10, 10))
    assert sorted(window.model.node_ids()) == ["greeting", "name", "save", "show"]
    # A ComfyUI workflow imports through app.importing, as File > Import does.
    assert drop(window, [REPO / "tests/data/comfy/sd15_default.api.json"], QPoint(10, 10))
    assert "Sampler" in {window.model.node(n).type for n in window.model.node_ids()}
    assert window.path is None  # an import is a new file
    readme = tmp_path / "notes.txt"
    readme.write_text("x")
    assert not drop(window, [readme], QPoint(10, 10))  # refused at the door


def test_a_run_resolves_library_names_as_app_run_does(window: MainWindow, models: Path, monkeypatch) -> None:
    started: list = []
    monkeypatch.setattr(window.runner, "start", lambda wf, out: started.append(wf))
    monkeypatch.setattr(window, "show_problems", lambda title, problems, text: started.append(problems))
    window.model.set_param(
        "load", "path", "sd15/DreamShaper_8.safetensors"
    )  # as an imported workflow names it
    assert window.run_workflow()
    assert started[0].nodes["load"].params["path"] == str(
        models / "checkpoints/sd15/DreamShaper_8.safetensors"
    )
    assert (
        window.model.node("load").params["path"] == "sd15/DreamShaper_8.safetensors"
    )  # the graph keeps the name
    window._set_running(False)

    window.model.set_param("load", "path", "missing.safetensors")
    assert not window.run_workflow()
    (problem,) = started[1]
    assert (problem.node, problem.field) == ("load", "path") and str(models) in problem.reason


def test_the_picker_is_wide_enough_for_its_names_and_shows_their_folder(qtbot, window: MainWindow) -> None:
    from app.gui.model_picker import DETAIL_ROLE

    window.scene.clearSelection()
    window.scene.node_items["load"].setSelected(True)
    field = window.inspector.editors["path"]
    completer = field.picker
    field.editor.clear()
    field.editor.setFocus()
    qtbot.keyClicks(field.editor, "dream")
    popup = completer.popup()
    assert popup.isVisible()
    name = "sd15/DreamShaper_8.safetensors"
    index = completer.completionModel().index(0, 0)
    assert index.data() == name and index.data(DETAIL_ROLE) == "checkpoints"
    needed = popup.fontMetrics().horizontalAdvance(name) + popup.fontMetrics().horizontalAdvance(
        "checkpoints"
    )
    assert popup.width() > needed > field.editor.width()  # the field alone would cut the name
    assert popup.width() >= completer.popup_width()


def test_the_demo_names_are_the_demo_models(qtbot) -> None:
    from app.gui.model_picker import DEMO_NAMES
    from pipelines.diffusion.demo_models import DEMO_MODELS

    assert set(DEMO_NAMES) == set(DEMO_MODELS)
