"""A searchable model picker for loader fields: the files of the models library (`--models-dir`, the saved
roots, `NODELOOM_MODELS_DIRS`) and the built-in models, filtered as you type.

Lives here: `DEMO_NAMES`, `ModelChoice`, `is_model_field`, `model_choices`, `ModelCompleter`. Imports Qt, `app.gui.theme`, `nodes.spec`,
`nodes.model_names` (which library folders each loader searches), `pipelines.models_library`,
`pipelines.paths`.

The field keeps its line edit (a path typed or browsed still works); a completer lists the models whose
name contains what was typed, anywhere, in any case. Choosing one writes its full path (or `builtin:NAME`),
so the graph runs wherever it is opened on this machine, with or without the library set.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QModelIndex, QObject, QPersistentModelIndex, Qt
from PySide6.QtGui import QColor, QFontMetrics, QGuiApplication, QPainter, QStandardItem, QStandardItemModel
from PySide6.QtWidgets import QCompleter, QStyledItemDelegate, QStyleOptionViewItem

from app.gui import theme
from nodes.spec import Param
from pipelines.models_library import ModelsLibrary

VALUE_ROLE = Qt.ItemDataRole.UserRole + 1
DETAIL_ROLE = Qt.ItemDataRole.UserRole + 2  # the dimmed text right of the name: where the model comes from

# The tiny random-weight models `demo:NAME` builds offline on first use (the keys of
# pipelines.diffusion.demo_models.DEMO_MODELS, which imports torch: not at first paint).
DEMO_NAMES = (
    "tiny-sd",
    "tiny-sdxl",
    "tiny-pixart",
    "tiny-sd3",
    "tiny-flux",
    "tiny-zimage",
    "tiny-qwenimage",
    "tiny-flux2-klein",
    "tiny-flux2-dev",
    "tiny-wan",
    "tiny-wan22",
    "tiny-wan-i2v",
    "tiny-wan22-i2v",
    "tiny-wan22-ti2v",
    "tiny-wan-flf2v",
    "tiny-qwenimage-edit",
    "tiny-qwenimage-edit-2511",
    "tiny-krea2",
    "tiny-krea2-turbo",
    "tiny-ltx2",
    "tiny-minimax",
    "tiny-qwenimage21",
    "tiny-qwenimage21-turbo",
    "tiny-flux3",
)

# Models shipped with Nodeloom, by loader type (`builtin:` names, see pipelines/paths.py).
BUILTINS: dict[str, tuple[str, ...]] = {
    "LoadDiffusionModel": ("builtin:shapes-sd", *(f"demo:{name}" for name in DEMO_NAMES)),
    "LoadControlNet": ("builtin:shapes-controlnet-canny",),
    "LoadLLM": ("builtin:smollm2",),
}


@dataclass(frozen=True)
class ModelChoice:
    name: str  # what the list shows and the search matches: the name relative to its models folder
    value: str  # what goes into the field: a full path or builtin:NAME
    where: str  # the folder it was found in (tooltip)
    detail: str = ""  # shown dimmed beside the name: kind folder and family ("checkpoints · sd"), "built in"


def _suffixes(file_filter: str) -> tuple[str, ...]:
    return tuple(s.lower() for s in re.findall(r"\*(\.[A-Za-z0-9]+)", file_filter))


def is_model_field(node_type: str, param: Param) -> bool:
    """A loader's weights field: a path parameter the models library can fill."""
    from nodes.model_names import MODEL_PARAMS

    if param.kind != "path":
        return False
    if any(name == param.name for name, _ in MODEL_PARAMS.get(node_type, ())):
        return True
    return node_type in BUILTINS and param.name == "path"


def model_choices(library: ModelsLibrary, node_type: str, param: Param) -> list[ModelChoice]:
    """The built-in models and every library file the field may take, by its loader's kinds and suffixes."""
    from nodes.model_names import MODEL_PARAMS

    kinds = next((k for name, k in MODEL_PARAMS.get(node_type, ()) if name == param.name), None)
    suffixes = _suffixes(param.file_filter)
    takes_folders = "dir" in param.file_filter or "model_index.json" in param.file_filter
    out = [
        ModelChoice(b, b, "built in", "demo, built on first use" if b.startswith("demo:") else "built in")
        for b in BUILTINS.get(node_type, ())
    ]
    seen: set[Path] = set()
    for name, path in library.files(kinds):
        if (
            takes_folders and not suffixes and path.is_file()
        ):  # a folder model (ControlNet): the file's folder
            if "/" not in name:
                continue
            name, path = name.rsplit("/", 1)[0], path.parent
        fits = takes_folders if path.is_dir() else (not suffixes or path.suffix.lower() in suffixes)
        if fits and path not in seen:
            seen.add(path)
            folder = path.parents[name.count("/")]  # the library's kind folder ("checkpoints", "loras")
            out.append(ModelChoice(name, str(path), str(path.parent), _detail(folder.name, path)))
    return out


def _detail(kind: str, path: Path) -> str:
    """The kind folder and the family the file's header names: "checkpoints · sdxl" (by family and kind)."""
    from pipelines.models_library import detect_family

    try:
        family = detect_family(path)
    except (OSError, ValueError):  # an unreadable or damaged header: listed by its folder only
        family = None
    return f"{kind} · {family}" if family else kind


DETAIL_GAP = 24  # pixels between a name and its dimmed folder


class _DetailDelegate(QStyledItemDelegate):
    """The name as usual, its DETAIL_ROLE text dimmed at the right of the row."""

    def paint(
        self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> None:
        super().paint(painter, option, index)
        detail = index.data(DETAIL_ROLE)
        if detail:
            painter.save()
            painter.setPen(QColor(theme.TEXT_DIM))
            rect = option.rect.adjusted(0, 0, -6, 0)  # type: ignore[attr-defined]
            painter.drawText(rect, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, detail)
            painter.restore()


class ModelCompleter(QCompleter):
    """Matches anywhere in the model's name, any case; inserts the model's full path (or builtin: name)."""

    def __init__(self, choices: list[ModelChoice], parent: QObject | None = None) -> None:
        model = QStandardItemModel(parent)
        for choice in choices:
            item = QStandardItem(choice.name)
            item.setData(choice.value, VALUE_ROLE)
            item.setData(choice.detail, DETAIL_ROLE)
            item.setToolTip(
                f"{choice.value}" if choice.where == "built in" else f"{choice.name}\n{choice.where}"
            )
            item.setEditable(False)
            model.appendRow(item)
        super().__init__(model, parent)
        self.choices = choices
        self.setCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.setFilterMode(Qt.MatchFlag.MatchContains)
        self.setCompletionMode(QCompleter.CompletionMode.PopupCompletion)
        self.setMaxVisibleItems(12)
        # A framed list a shade lighter than the panels, so it reads as a drop-down over the inspector.
        self.popup().setStyleSheet(
            f"QListView {{ background: {theme.PANEL}; border: 1px solid {theme.NODE_BORDER}; padding: 2px; }}"
            f"QListView::item:selected {{ background: {theme.SELECTED}; color: #101010; }}"
        )
        self.popup().setItemDelegate(_DetailDelegate(self.popup()))
        self.popup().setMinimumWidth(self.popup_width())

    def popup_width(self) -> int:
        """Wide enough for the longest name and its folder (the field alone cut "mySD15_fake.safet…"),
        bounded by the screen."""
        metrics = QFontMetrics(self.popup().font())
        widest = max(
            (metrics.horizontalAdvance(c.name) + metrics.horizontalAdvance(c.detail) for c in self.choices),
            default=0,
        )
        screen = QGuiApplication.primaryScreen()
        bound = screen.availableGeometry().width() - 40 if screen is not None else 1200
        return min(widest + DETAIL_GAP + 40, bound)  # 40: frame, padding and the scroll bar

    def pathFromIndex(self, index: QModelIndex) -> str:
        return str(index.data(VALUE_ROLE))

    def show_all(self) -> None:
        """The whole list, as a combo box's arrow opens it."""
        self.setCompletionPrefix("")
        self.complete()
