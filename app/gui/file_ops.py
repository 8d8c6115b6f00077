"""File handling for the main window: New, Open, Save, Save As, Recent, the dirty marker, confirmation
before losing work, autosave with crash recovery, drag-and-drop of workflow JSON or PNG files, and the
dialog that lists every problem of an invalid file.

Lives here: `FileOpsMixin`, `read_for_editing`, `is_shipped_example`, `untitled_from_example`. Imports Qt,
`app.gui.autosave`, `nodes.workflow`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QFileDialog, QMessageBox

from app.gui.drops import DROP_SUFFIXES
from app.gui.history import HISTORY_MIME
from nodes.registry import NodeRegistry
from nodes.workflow import (
    Problem,
    Workflow,
    WorkflowError,
    dumps_workflow,
    parse_workflow,
    read_workflow_json,
)

if TYPE_CHECKING:
    from app.gui.main_window import MainWindow

FILE_FILTER = (
    "Nodeloom workflows (*.json *.png *.mp4 *.webm *.webp);;Workflow JSON (*.json);;PNG with workflow (*.png);;"
    "Video with workflow (*.mp4 *.webm *.webp);;All files (*)"
)
# Files that carry a workflow but are not one: opening them never makes them the graph's save target.
CARRIER_SUFFIXES = (".png", ".mp4", ".webm", ".webp")
# Problems an unfinished graph may have and still be opened for editing (the run reports them).
SOFT_PREFIXES = ("required input",)


def read_for_editing(data: Any, registry: NodeRegistry, source: str) -> tuple[Workflow, list[Problem]]:
    """Parse and validate; raises WorkflowError for problems that prevent editing, returns the soft ones."""
    wf, problems = parse_workflow(data, registry, source=source)
    hard = [p for p in problems if not p.reason.startswith(SOFT_PREFIXES)]
    if hard:
        raise WorkflowError(problems)
    return wf, problems


def is_shipped_example(path: Path) -> bool:
    from pipelines.paths import RESOURCES_DIR

    try:
        return path.resolve().is_relative_to((RESOURCES_DIR / "workflows").resolve())
    except OSError:
        return False


def untitled_from_example(name: str) -> str:
    """How messages name an example's unsaved copy (the user saved it nowhere yet)."""
    return f"Untitled (from example {name})"


class FileOpsMixin:
    """Mixed into MainWindow; uses its model, undo stack, settings, autosave and view."""

    path: Path | None
    _force_dirty: bool
    template_name: str | None = None  # an example opened as a template: Save asks where to keep the copy

    # -- state ------------------------------------------------------------------------------------

    def is_dirty(self: MainWindow) -> bool:
        return self._force_dirty or not self.undo_stack.isClean()

    def update_title(self: MainWindow) -> None:
        name = (
            self.path.name
            if self.path
            else f"{self.template_name} (example)"
            if self.template_name
            else "Untitled"
        )
        self.setWindowTitle(f"{name}{'*' if self.is_dirty() else ''} — Nodeloom")

    def ask_save_changes(self: MainWindow) -> str:
        """ "save", "discard" or "cancel"; tests replace this."""
        buttons = (
            QMessageBox.StandardButton.Save
            | QMessageBox.StandardButton.Discard
            | QMessageBox.StandardButton.Cancel
        )
        answer = QMessageBox.question(
            self,
            "Unsaved changes",
            f"Save the changes to {self.path.name if self.path else 'a new file'}?",
            buttons,
            QMessageBox.StandardButton.Save,
        )
        return {QMessageBox.StandardButton.Save: "save", QMessageBox.StandardButton.Discard: "discard"}.get(
            answer, "cancel"
        )

    def confirm_discard(self: MainWindow) -> bool:
        """True when it is fine to replace the current graph."""
        if not self.is_dirty():
            return True
        answer = self.ask_save_changes()
        if answer == "save":
            return self.save()
        return answer == "discard"

    def show_problems(self: MainWindow, title: str, problems: list[Problem], intro: str = "") -> None:
        """A non-blocking dialog listing every problem: file, node, field and reason."""
        self.last_problems = list(problems)
        lines = [f"• {p.node or '(file)'}{'.' + p.field if p.field else ''}: {p.reason}" for p in problems]
        # The status bar says so too: a previous run's message must not stand for this refusal.
        more = f" (+{len(lines) - 1} more)" if len(lines) > 1 else ""
        self.status(f"{title}: {lines[0][2:]}{more}" if lines else title)
        box = QMessageBox(
            QMessageBox.Icon.Warning,
            title,
            intro or f"{len(problems)} problem{'s' if len(problems) != 1 else ''} found:",
            parent=self,
        )
        box.setInformativeText("\n".join(lines[:20]) + ("\n…" if len(lines) > 20 else ""))
        box.setDetailedText("\n".join(str(p) for p in problems))
        # One problem per line rather than wrapped into a narrow column.
        box.setStyleSheet("QLabel#qt_msgbox_label, QLabel#qt_msgbox_informativelabel { min-width: 520px; }")
        box.setWindowModality(Qt.WindowModality.WindowModal)
        box.open()
        self.problem_dialog = box

    # -- commands ---------------------------------------------------------------------------------

    def new_file(self: MainWindow) -> None:
        if not self.confirm_discard():
            return
        self.set_workflow(Workflow(source="Untitled"), None)

    def open_dialog(self: MainWindow) -> None:
        if not self.confirm_discard():
            return
        start = str(self.path.parent) if self.path else str(Path.cwd())
        path, _ = QFileDialog.getOpenFileName(self, "Open workflow", start, FILE_FILTER)
        if path:
            self.open_path(Path(path), confirm=False)

    def open_path(self: MainWindow, path: Path, *, confirm: bool = True) -> bool:
        """Open a workflow JSON or a PNG with one embedded. On problems the current graph stays."""
        if confirm and not self.confirm_discard():
            return False
        try:
            wf, soft = read_for_editing(read_workflow_json(path), self.registry, str(path))
        except WorkflowError as exc:
            self.show_problems(
                f"Cannot open {Path(path).name}",
                exc.problems,
                f"{Path(path).name} could not be opened; your current graph is unchanged.",
            )
            self.status(f"Could not open {path}")
            return False
        is_png = Path(path).suffix.lower() in CARRIER_SUFFIXES
        # A shipped example opens as a template: Save goes to Save As, never over the example itself.
        template = is_shipped_example(Path(path))
        if template:  # messages name the unsaved copy, never the installed example's path
            wf.source = untitled_from_example(Path(path).name)
        self.set_workflow(wf, None if is_png or template else Path(path))
        self.template_name = Path(path).name if template else None
        self.update_title()
        self.settings.add_recent(Path(path))
        if soft:
            self.show_problems(
                f"{Path(path).name}: unfinished graph", soft, "Opened. These need fixing before it can run:"
            )
        if template:
            self.status(f"Opened the example {Path(path).name}; Save asks where to keep your copy")
        else:
            self.status(f"Opened {path}")
        return True

    def set_workflow(self: MainWindow, wf: Workflow, path: Path | None) -> None:
        self.model.load(wf)
        self.undo_stack.clear()
        self.path = path
        self.template_name = None
        self._force_dirty = False
        self.output.clear_outputs()  # the previous graph's pictures and texts; the history keeps them
        if not self.view.restore_view_state(wf.ui.get("view") or {}):
            self.view.fit()
        self.update_title()

    def current_workflow(self: MainWindow) -> Workflow:
        wf = self.model.to_workflow()
        wf.ui["view"] = self.view.view_state()
        return wf

    def save(self: MainWindow) -> bool:
        if self.path is None:
            return self.save_as()
        return self.save_to(self.path)

    def save_as(self: MainWindow) -> bool:
        start = str(self.path) if self.path else str(Path.cwd() / "workflow.json")
        path, _ = QFileDialog.getSaveFileName(self, "Save workflow", start, "Workflow JSON (*.json)")
        if not path:
            return False
        if not path.endswith(".json"):
            path += ".json"
        return self.save_to(Path(path))

    def save_to(self: MainWindow, path: Path) -> bool:
        from nodes.workflow import atomic_write_text

        if is_shipped_example(Path(path)):
            QMessageBox.warning(
                self, "Save", f"{Path(path).name} is a shipped example; save your copy somewhere else."
            )
            return False
        try:
            atomic_write_text(path, dumps_workflow(self.current_workflow()))
        except OSError as exc:
            QMessageBox.critical(self, "Save failed", f"Could not save {path}:\n{exc.strerror or exc}")
            return False
        self.path = Path(path)
        self.model.workflow.source = str(path)  # messages from now on name the file it was saved to
        self.template_name = None
        self.undo_stack.setClean()
        self._force_dirty = False
        self.settings.add_recent(self.path)
        self.autosave.clear()
        self.update_title()
        self.status(f"Saved {path}")
        return True

    def import_dialog(self: MainWindow) -> None:
        """File > Import…: another tool's workflow through `app.importing.import_file`, opened unsaved."""
        from app.importing import IMPORT_FILTER, ImportUnavailable, import_file

        if not self.confirm_discard():
            return
        start = str(self.path.parent) if self.path else str(Path.cwd())
        path, _ = QFileDialog.getOpenFileName(self, "Import workflow", start, IMPORT_FILTER)
        if path:
            self.import_path(Path(path), import_file, ImportUnavailable)

    def import_path(self: MainWindow, path: Path, importer: Any, unavailable: type = Exception) -> bool:
        try:
            wf = importer(path, self.registry)
        except WorkflowError as exc:
            self.show_problems(f"Cannot import {path.name}", exc.problems)
            return False
        except unavailable as exc:
            QMessageBox.information(self, "Import", str(exc))
            return False
        self.set_workflow(wf, None)  # an import is a new file: Save asks where
        self._force_dirty = True
        self.update_title()
        self.status(f"Imported {path}")
        self.import_marks.after_import(path)  # the summary banner and the marks (app/gui/import_report.py)
        return True

    def fill_recent_menu(self: MainWindow) -> None:
        menu = self.recent_menu
        menu.clear()
        recent = self.settings.recent()
        for entry in recent:
            action = menu.addAction(entry)
            action.triggered.connect(lambda _checked=False, p=entry: self.open_path(Path(p)))
        if not recent:
            menu.addAction("No recent files").setEnabled(False)
        else:
            menu.addSeparator()
            menu.addAction("Clear list", self.settings.clear_recent)

    # -- autosave and recovery --------------------------------------------------------------------

    def autosave_now(self: MainWindow) -> None:
        if self.is_dirty():
            self.autosave.write(self.current_workflow().to_dict(), str(self.path) if self.path else None)

    def ask_recover(self: MainWindow, when: str) -> bool:
        answer = QMessageBox.question(
            self,
            "Recover unsaved work?",
            f"Nodeloom did not close normally. Recover the graph autosaved at {when}?",
        )
        return answer == QMessageBox.StandardButton.Yes

    def offer_recovery(self: MainWindow) -> bool:
        pending = self.autosave.pending()
        if pending is None:
            return False
        when = time.strftime("%H:%M on %d %b", time.localtime(self.autosave.path.stat().st_mtime))
        if not self.ask_recover(when):
            self.autosave.clear()
            return False
        try:
            wf, _soft = read_for_editing(pending["workflow"], self.registry, "autosave")
        except WorkflowError as exc:
            self.autosave.set_aside()  # keep the unreadable file as *.broken rather than lose it
            self.show_problems("Recovery failed", exc.problems)
            return False
        source = pending.get("source")
        self.set_workflow(wf, Path(source) if source else None)
        self._force_dirty = True
        self.update_title()
        self.status("Recovered unsaved work; save it to keep it")
        return True

    # -- drag and drop ----------------------------------------------------------------------------

    def dragEnterEvent(self: MainWindow, event: QDragEnterEvent) -> None:
        if event.mimeData().hasFormat(HISTORY_MIME):
            event.acceptProposedAction()
            return
        urls = event.mimeData().urls()
        if any(u.isLocalFile() and u.toLocalFile().lower().endswith(DROP_SUFFIXES) for u in urls):
            event.acceptProposedAction()  # workflows, pictures and weights files (app.gui.drops)

    def dropEvent(self: MainWindow, event: QDropEvent) -> None:
        if event.mimeData().hasFormat(HISTORY_MIME):  # a picture from the output history: Load Image
            event.acceptProposedAction()
            local = self.view.viewport().mapFrom(self, event.position().toPoint())
            for file in bytes(event.mimeData().data(HISTORY_MIME)).decode().splitlines()[:1]:
                self.drop_history_picture(file, self.view.mapToScene(local))
            return
        paths = [Path(u.toLocalFile()) for u in event.mimeData().urls() if u.isLocalFile()]
        if paths:
            event.acceptProposedAction()
            local = self.view.viewport().mapFrom(self, event.position().toPoint())
            self.drop_files(paths, self.view.mapToScene(local))
