"""The dark theme: colours, fonts and the application style sheet, in one place.

Lives here: colour constants, `apply_theme(app)`, `category_color`, `state colours`. Imports Qt only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from PySide6.QtGui import QColor, QFont, QPalette
from PySide6.QtWidgets import QApplication

BACKGROUND = "#1e1f22"
CANVAS = "#232428"
GRID_MINOR = "#2a2b30"
GRID_MAJOR = "#32343a"
PANEL = "#2b2d31"
NODE_BODY = "#34363c"
NODE_BORDER = "#4a4d55"
TEXT = "#e6e6e6"
TEXT_DIM = "#9aa0a6"
ACCENT = "#4e9bff"
SELECTED = "#ffb74d"
ERROR = "#ef5350"
RUNNING = "#4e9bff"
DONE = "#66bb6a"
CACHED = "#8d99ae"
QUEUED = "#b0a36a"
BYPASS = "#9c5fd6"

# Header colour for each built-in category; other categories get a stable colour from their name.
CATEGORY_COLORS: Mapping[str, str] = MappingProxyType(
    {
        "primitives": "#5c6b7a",
        "text": "#6a7d3f",
        "output": "#7a4a5c",
        "image": "#3f6a8a",
        "diffusion": "#5e4a8a",
        "diffusion/loaders": "#3d5a8c",
        "diffusion/latent": "#8a4a6e",
        "loaders": "#4a5e8a",
        "sampling": "#6e4a8a",
        "conditioning": "#8a6a3f",
        "latent": "#8a4a6e",
        "llm": "#2f7a72",
        "test": "#555555",
    }
)


def category_color(category: str) -> QColor:
    if category in CATEGORY_COLORS:
        return QColor(CATEGORY_COLORS[category])
    hue = int(hashlib.md5(category.encode()).hexdigest()[:4], 16) % 360
    return QColor.fromHsl(hue, 90, 85)


# Arrows for spin boxes and combos: once a style sheet styles a spin box, Fusion's own arrows are drawn
# in the (dark) text colour of the native palette and vanish on this theme.
_ICONS = (Path(__file__).resolve().parent / "icons").as_posix()

STYLE_SHEET = f"""
QMainWindow, QDialog {{ background: {BACKGROUND}; }}
QWidget {{ color: {TEXT}; font-size: 10pt; }}
QDockWidget {{ titlebar-close-icon: none; }}
QDockWidget::title {{ background: {PANEL}; padding: 4px 8px; font-weight: bold; }}
QMenuBar, QMenu, QStatusBar, QToolBar {{ background: {PANEL}; }}
QMenu::item:selected, QMenuBar::item:selected {{ background: #3d4047; }}
QToolBar {{ border: none; spacing: 4px; padding: 2px; }}
QToolButton {{ padding: 4px 8px; border-radius: 4px; }}
QToolButton:hover {{ background: #3d4047; }}
QToolButton#runButton {{ background: #2e7d32; font-weight: bold; }}
QToolButton#runButton:disabled {{ background: #3a4a3b; color: #888; }}
QToolButton#cancelButton {{ background: #8e2b2b; }}
QToolButton#cancelButton:disabled {{ background: #4a3535; color: #888; }}
QLineEdit, QPlainTextEdit, QTextEdit, QSpinBox, QDoubleSpinBox, QComboBox, QListWidget {{
    background: #1b1c1f; border: 1px solid #45484f; border-radius: 3px; padding: 2px;
    selection-background-color: {ACCENT}; }}
QSpinBox, QDoubleSpinBox {{ padding-right: 18px; }}
QSpinBox::up-button, QDoubleSpinBox::up-button, QSpinBox::down-button, QDoubleSpinBox::down-button {{
    subcontrol-origin: border; width: 16px; background: #2e3035; border-left: 1px solid #45484f; }}
QSpinBox::up-button, QDoubleSpinBox::up-button {{ subcontrol-position: top right; }}
QSpinBox::down-button, QDoubleSpinBox::down-button {{ subcontrol-position: bottom right; }}
QSpinBox::up-button:hover, QDoubleSpinBox::up-button:hover,
QSpinBox::down-button:hover, QDoubleSpinBox::down-button:hover {{ background: #3d4047; }}
QSpinBox::up-arrow, QDoubleSpinBox::up-arrow {{ image: url({_ICONS}/arrow_up.svg); width: 9px; height: 6px; }}
QSpinBox::down-arrow, QDoubleSpinBox::down-arrow {{
    image: url({_ICONS}/arrow_down.svg); width: 9px; height: 6px; }}
QComboBox::drop-down {{ border-left: 1px solid #45484f; width: 16px; }}
QComboBox::down-arrow {{ image: url({_ICONS}/arrow_down.svg); width: 9px; height: 6px; }}
QTabWidget::pane {{ border: 1px solid #3a3c42; }}
QTabBar::tab {{ background: {PANEL}; padding: 4px 10px; border: 1px solid #3a3c42; }}
QTabBar::tab:selected {{ background: #3d4047; }}
QPushButton {{ background: #3d4047; border: 1px solid #50535b; border-radius: 3px; padding: 3px 10px; }}
QPushButton:hover {{ background: #4a4d55; }}
QProgressBar {{ border: 1px solid #45484f; border-radius: 3px; text-align: center; background: #1b1c1f; }}
QProgressBar::chunk {{ background: {ACCENT}; }}
QLabel#hint {{ color: {TEXT_DIM}; }}
"""


def apply_theme(app: QApplication) -> None:
    app.setStyle("Fusion")
    pal = QPalette()
    for role, color in (
        (QPalette.ColorRole.Window, BACKGROUND),
        (QPalette.ColorRole.Base, "#1b1c1f"),
        (QPalette.ColorRole.AlternateBase, PANEL),
        (QPalette.ColorRole.Text, TEXT),
        (QPalette.ColorRole.WindowText, TEXT),
        (QPalette.ColorRole.Button, PANEL),
        (QPalette.ColorRole.ButtonText, TEXT),
        (QPalette.ColorRole.Highlight, ACCENT),
        (QPalette.ColorRole.ToolTipBase, PANEL),
        (QPalette.ColorRole.ToolTipText, TEXT),
    ):
        pal.setColor(role, QColor(color))
    app.setPalette(pal)
    app.setStyleSheet(STYLE_SHEET)
    font = QFont(app.font())
    font.setPointSizeF(10)
    app.setFont(font)


WARNING = "#e0a030"  # an imported node that differs from ComfyUI's (app/gui/import_report.py)
