"""The user's blueprint library: subgraphs saved to reuse (Save as Blueprint), listed in the palette under
"Blueprints" and added to any graph by a click, Enter, a drag from the palette or a drop of the file.

Lives here: `BLUEPRINT_CATEGORY`, `blueprint_folder`, `BlueprintLibrary`. Imports Qt, `memory.paths`
(the user data folder), `app.gui.subgraph_commands`, `nodes.subgraph_blueprint`, `nodes.subgraph`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QPointF
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QInputDialog

from app.gui.subgraph_commands import ReplaceLevelCommand
from memory.paths import user_data_dir
from nodes.subgraph import is_instance
from nodes.subgraph_blueprint import (
    blueprint_document,
    blueprint_entries,
    blueprint_file_name,
    blueprint_title,
    insert_blueprint,
    read_blueprint,
)

if TYPE_CHECKING:
    from app.gui.main_window import MainWindow

BLUEPRINT_CATEGORY = "Blueprints"


def blueprint_folder() -> Path:
    """`<user data dir>/blueprints` (NODELOOM_DATA_DIR moves it, as for every per-user file)."""
    return user_data_dir() / "blueprints"


class BlueprintLibrary:
    def __init__(self, window: MainWindow) -> None:
        self.window = window
        self.save_action = QAction("Save as &Blueprint…", window)
        self.save_action.setToolTip(
            f"Save the selected subgraph to your blueprints ({blueprint_folder()}), listed in the palette"
        )
        self.save_action.triggered.connect(lambda: self.save_selected())
        window.palette.extra_entries = self.palette_entries
        window.palette.blueprint_chosen.connect(self.insert)

    def palette_entries(self) -> list[tuple[str, str, str]]:
        """(title, category, file) for the palette."""
        return [
            (title, BLUEPRINT_CATEGORY, str(path)) for title, path in blueprint_entries(blueprint_folder())
        ]

    def save_selected(self, title: str | None = None) -> Path | None:
        w = self.window
        ids = [nid for nid in w.scene.selected_node_ids() if is_instance(w.model.workflow, nid)]
        if not ids:
            w.status("Select a subgraph node to save it as a blueprint")
            return None
        if title is None:
            title, ok = QInputDialog.getText(
                w, "Save as blueprint", "Blueprint name:", text=blueprint_title(w.model.workflow, ids[0])
            )
            if not ok or not title.strip():
                return None
        title = title.strip()
        doc = blueprint_document(w.model.workflow, ids[0], title)
        folder = blueprint_folder()
        path = folder / blueprint_file_name(title)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(doc, indent=1), encoding="utf-8")
        except OSError as exc:
            w.status(f"Could not save the blueprint to {path}: {exc.strerror or exc}")
            return None
        w.status(f"Saved blueprint {title!r} to {path}: in the palette under {BLUEPRINT_CATEGORY}")
        return path

    def insert(self, file: str, pos: QPointF) -> str | None:
        """Add an instance of the blueprint in `file` at `pos` on the shown level: one undo step."""
        w = self.window
        try:
            doc = read_blueprint(Path(file))
        except ValueError as exc:
            w.status(str(exc))
            return None
        wf, instance = insert_blueprint(w.model.workflow, doc, (pos.x(), pos.y()))
        title = doc.get("meta", {}).get("title") or instance
        w.undo_stack.push(ReplaceLevelCommand(w.model, wf, f"Add blueprint {title}"))
        w.scene.clearSelection()
        if instance in w.scene.node_items:
            w.scene.node_items[instance].setSelected(True)
        w.status(f"Added blueprint {title} as {instance}")
        return instance
