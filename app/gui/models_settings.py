"""Settings > Models folders: the saved models roots (the same list `app models add-root` edits), with Add and
Remove, and what the library finds there counted by kind and family (issue 29).

Lives here: `ModelsFolders` (the widget the Settings dialog shows), `found_text`, `library_after_settings`.
Imports Qt, `nodes.files` (the atomic writer), `pipelines.models_library`.

The roots are saved in the user data dir (`pipelines.models_library.save_roots`), not in QSettings, so the
CLI and the editor share one list. Roots given by `--models-dir` or `NODELOOM_MODELS_DIRS` stay in the
window's library when the saved list changes; they are shown as not removable here.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from pipelines.models_library import ModelsLibrary, load_saved_roots, save_roots


def found_text(roots: list[Path]) -> str:
    """ "found 3 models: checkpoints 2 (sd 1, sdxl 1), loras 1 (sd 1)", or why nothing is listed."""
    if not roots:
        return "No models folder: add the folder that holds your checkpoints (a ComfyUI install works too)."
    entries = ModelsLibrary(roots).entries()  # reads each file's header: the family
    if not entries:
        return "No model files found in these folders yet."
    kinds: dict[str, Counter[str]] = {}
    for entry in entries:
        kinds.setdefault(entry.kind or "models", Counter())[entry.family] += 1
    parts = [
        f"{kind} {sum(c.values())} ({', '.join(f'{fam} {n}' for fam, n in sorted(c.items()))})"
        for kind, c in sorted(kinds.items())
    ]
    return f"Found {len(entries)} model(s): " + "; ".join(parts)


class ModelsFolders(QWidget):
    def __init__(self, fixed: list[Path], parent: QWidget | None = None) -> None:
        """`fixed`: roots from the command line or the environment (listed, not removable)."""
        super().__init__(parent)
        self.saved = load_saved_roots()
        self.fixed = [r for r in fixed if r not in self.saved]
        self.list = QListWidget()
        self.list.setObjectName("modelsFolders")
        self.list.setMaximumHeight(96)
        for root in self.fixed:
            item = QListWidgetItem(f"{root}  (from --models-dir / NODELOOM_MODELS_DIRS)")
            item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsSelectable)
            item.setData(Qt.ItemDataRole.UserRole, None)
            self.list.addItem(item)
        for root in self.saved:
            self._add_item(root)
        self.add_button = QPushButton("Add…")
        self.add_button.clicked.connect(self._browse)
        self.remove_button = QPushButton("Remove")
        self.remove_button.clicked.connect(self.remove_selected)
        self.found = QLabel("")
        self.found.setObjectName("hint")
        self.found.setWordWrap(True)
        buttons = QHBoxLayout()
        buttons.addWidget(self.add_button)
        buttons.addWidget(self.remove_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.list)
        layout.addLayout(buttons)
        layout.addWidget(self.found)
        self.refresh_found()

    def _add_item(self, root: Path) -> None:
        item = QListWidgetItem(str(root))
        item.setData(Qt.ItemDataRole.UserRole, str(root))
        self.list.addItem(item)

    def roots(self) -> list[Path]:
        """The saved roots as edited (the fixed ones aside)."""
        out = []
        for i in range(self.list.count()):
            value = self.list.item(i).data(Qt.ItemDataRole.UserRole)
            if value:
                out.append(Path(value))
        return out

    def add_folder(self, folder: Path) -> bool:
        folder = folder.expanduser().resolve()
        if not folder.is_dir():
            self.found.setText(f"⚠ {folder} is not a folder")
            return False
        if folder not in self.roots():
            self._add_item(folder)
        self.refresh_found()
        return True

    def remove_selected(self) -> None:
        for item in self.list.selectedItems():
            if item.data(Qt.ItemDataRole.UserRole):
                self.list.takeItem(self.list.row(item))
        self.refresh_found()

    def _browse(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Models folder", str(Path.home()))
        if folder:
            self.add_folder(Path(folder))

    def refresh_found(self) -> None:
        self.found.setText(found_text([*self.fixed, *self.roots()]))

    def save(self) -> bool:
        """Write the saved roots when they changed; True when they did."""
        from nodes.files import atomic_write_text

        roots = self.roots()
        if roots == self.saved:
            return False
        save_roots(roots, atomic_write_text)
        self.saved = roots
        return True


def library_after_settings(current: ModelsLibrary, old_saved: list[Path]) -> ModelsLibrary:
    """The window's library with the saved roots replaced: roots it had from elsewhere stay first."""
    old = set(ModelsLibrary(old_saved).roots)
    others = [r for r in current.roots if r not in old]
    return ModelsLibrary([*others, *load_saved_roots()])
