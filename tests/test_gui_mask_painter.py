"""The mask painter: a stroke paints the mask, undo takes it back, Save writes a picture whose alpha is the
mask, Load Image reads that mask back, and reopening the painter shows it again."""

from __future__ import annotations

from pathlib import Path

from PIL import Image
from PySide6.QtCore import QEvent, QPointF, Qt
from PySide6.QtGui import QMouseEvent
from PySide6.QtWidgets import QApplication

from app.gui.mask_painter import MaskPainterDialog, mask_file_for
from nodes.png import alpha_mask


def _drag(dialog: MaskPainterDialog, points: list[tuple[float, float]]) -> None:
    canvas = dialog.canvas
    first = QPointF(dialog.point_for(*points[0]))
    press = QMouseEvent(
        QEvent.Type.MouseButtonPress,
        first,
        first,
        Qt.MouseButton.LeftButton,
        Qt.MouseButton.LeftButton,
        Qt.KeyboardModifier.NoModifier,
    )
    QApplication.sendEvent(canvas, press)
    for x, y in points[1:]:
        p = QPointF(dialog.point_for(x, y))
        move = QMouseEvent(
            QEvent.Type.MouseMove,
            p,
            p,
            Qt.MouseButton.NoButton,
            Qt.MouseButton.LeftButton,
            Qt.KeyboardModifier.NoModifier,
        )
        QApplication.sendEvent(canvas, move)
    last = QPointF(dialog.point_for(*points[-1]))
    release = QMouseEvent(
        QEvent.Type.MouseButtonRelease,
        last,
        last,
        Qt.MouseButton.LeftButton,
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
    )
    QApplication.sendEvent(canvas, release)


def test_paint_undo_save_and_the_mask_round_trips(qtbot, tmp_path: Path) -> None:
    source = tmp_path / "photo.png"
    Image.new("RGB", (64, 48), (10, 200, 30)).save(source)
    dialog = MaskPainterDialog(source)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    assert dialog.canvas.painted_pixels() == 0

    dialog.size_slider.setValue(6)
    _drag(dialog, [(10, 24), (30, 24), (50, 24)])
    painted = dialog.canvas.painted_pixels()
    assert painted > 200  # a 40 px long, 6 px wide stroke
    assert dialog.canvas.undo() and dialog.canvas.painted_pixels() == 0

    _drag(dialog, [(32, 10), (32, 40)])
    stroke = dialog.canvas.painted_pixels()
    assert stroke > 100
    dialog.eraser_button.setChecked(True)
    _drag(dialog, [(32, 10), (32, 20)])
    assert 0 < dialog.canvas.painted_pixels() < stroke
    kept = dialog.canvas.painted_pixels()

    dialog.save()
    saved = mask_file_for(source)
    assert dialog.saved_path == saved and saved.name == "photo.mask.png"
    with Image.open(saved) as picture:
        assert picture.mode == "RGBA" and picture.size == (64, 48)
        assert picture.getpixel((0, 0)) == (10, 200, 30, 255)
        mask = alpha_mask(picture)
    assert int(mask.sum().item()) == kept and mask[0, 35, 32].item() == 1.0 and mask[0, 12, 32].item() == 0.0

    again = MaskPainterDialog(saved)
    qtbot.addWidget(again)
    assert again.canvas.painted_pixels() == kept
    again.canvas.invert()
    assert again.canvas.painted_pixels() == 64 * 48 - kept
    again.canvas.clear()
    assert again.canvas.painted_pixels() == 0
    assert mask_file_for(saved) == saved  # re-saving a mask file overwrites it, no .mask.mask.png


def test_the_inspector_offers_the_painter_for_load_image_and_takes_the_saved_mask(
    qtbot, tmp_path, monkeypatch
) -> None:
    from app.gui import mask_painter
    from app.gui.inspector import ParamEditor
    from nodes.registry import default_registry

    source = tmp_path / "photo.png"
    Image.new("RGB", (16, 16), (0, 0, 255)).save(source)
    param = default_registry(entry_point_packs=False)["LoadImage"].param("path")
    editor = ParamEditor(param, str(source))
    qtbot.addWidget(editor)
    button = next(b for b in editor.findChildren(mask_painter.QPushButton) if b.text() == "Mask…")

    def paint_and_save(self: MaskPainterDialog) -> int:
        self.canvas.invert()  # everything to repaint
        self.save()
        return 1

    monkeypatch.setattr(MaskPainterDialog, "exec", paint_and_save)
    changes: list[object] = []
    editor.changed.connect(lambda *a: changes.append(a))
    button.click()
    assert editor.value() == str(tmp_path / "photo.mask.png") and changes
    with Image.open(editor.value()) as saved:
        assert alpha_mask(saved).min().item() == 1.0
