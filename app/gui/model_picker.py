"""A searchable model picker for loader fields: the files of the models library (`--models-dir`, the saved
roots, `NODELOOM_MODELS_DIRS`) and the built-in models, filtered as you type.

Lives here: `ModelChoice`, `is_model_field`, `model_choices`, `ModelCompleter`. Imports Qt, `app.gui.theme`, `nodes.spec`,
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

from PySide6.QtCore import QModelIndex, QObject, Qt
from PySide6.QtGui import QStandardItem, QStandardItemModel
from PySide6.QtWidgets import QCompleter

from app.gui import theme
from nodes.spec import Param
from pipelines.models_library import ModelsLibrary

VALUE_ROLE = Qt.ItemDataRole.UserRole + 1

# Models shipped with Nodeloom, by loader type (`builtin:` names, see pipelines/paths.py).
BUILTINS: dict[str, tuple[str, ...]] = {
    "LoadDiffusionModel": ("builtin:shapes-sd",),
    "LoadControlNet": ("builtin:shapes-controlnet-canny",),
    "LoadLLM": ("builtin:smollm2",),
}


@dataclass(frozen=True)
class ModelChoice:
    name: str  # what the list shows and the search matches: the name relative to its models folder
    value: str  # what goes into the field: a full path or builtin:NAME
    where: str  # the folder it was found in (tooltip)


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
    out = [ModelChoice(b, b, "built in") for b in BUILTINS.get(node_type, ())]
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
            out.append(ModelChoice(name, str(path), str(path.parent)))
    return out


class ModelCompleter(QCompleter):
    """Matches anywhere in the model's name, any case; inserts the model's full path (or builtin: name)."""

    def __init__(self, choices: list[ModelChoice], parent: QObject | None = None) -> None:
        model = QStandardItemModel(parent)
        for choice in choices:
            item = QStandardItem(choice.name)
            item.setData(choice.value, VALUE_ROLE)
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

    def pathFromIndex(self, index: QModelIndex) -> str:
        return str(index.data(VALUE_ROLE))

    def show_all(self) -> None:
        """The whole list, as a combo box's arrow opens it."""
        self.setCompletionPrefix("")
        self.complete()
