"""The main window: the canvas in the middle, the inspector and outputs on the right, live plots below,
menus, toolbar, shortcuts and the status bar.

Lives here: `MainWindow`. Imports Qt and every `app.gui` module; `nodes` for the model and registry.
Menus and the toolbar are in `menus.py`, file handling in `file_ops.py`, editing in `edit_ops.py`, running
in `run_ops.py`.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import TYPE_CHECKING

import shiboken6
from PySide6.QtCore import QEvent, QPoint, Qt, QTimer
from PySide6.QtGui import QCloseEvent, QCursor, QResizeEvent, QUndoStack
from PySide6.QtWidgets import (
    QDockWidget,
    QLabel,
    QMainWindow,
    QProgressBar,
    QToolTip,
    QUndoView,
    QWidget,
)

from app.gui.arrange import install as install_arrange
from app.gui.autosave import INTERVAL_MS, Autosave
from app.gui.drops import DropOpsMixin
from app.gui.edit_ops import EditOpsMixin
from app.gui.file_ops import FileOpsMixin
from app.gui.find_bar import FindBar
from app.gui.history import HistoryPanel
from app.gui.history_ops import HistoryOpsMixin
from app.gui.import_report import install as install_import_marks
from app.gui.inspector import Inspector
from app.gui.menus import MenusMixin
from app.gui.minimap import Minimap
from app.gui.model_picker import model_choices
from app.gui.output_panel import OutputPanel
from app.gui.palette import NodePalette
from app.gui.plan_view import install as install_plan
from app.gui.plots import PlotsPanel
from app.gui.remote_run import install as install_remote
from app.gui.run_ops import RunOpsMixin
from app.gui.run_queue import QueuedRun, QueuePanel
from app.gui.run_worker import RunController
from app.gui.scene import GraphScene
from app.gui.settings import AppSettings, SettingsDialog
from app.gui.staples import StaplesMixin
from app.gui.startup import Warmup
from app.gui.subgraph_ops import install as install_subgraphs
from app.gui.view import GraphView
from nodes.latent_sizing import sizing_link
from nodes.registry import NodeRegistry
from nodes.subgraph_edit import NestedGraphModel
from nodes.workflow import Problem, Workflow
from pipelines.models_library import ModelsLibrary, load_saved_roots, roots_from_env

if TYPE_CHECKING:
    from pipelines.diffusion.sizes import ImageSize


class MainWindow(
    MenusMixin,
    FileOpsMixin,
    EditOpsMixin,
    RunOpsMixin,
    StaplesMixin,
    HistoryOpsMixin,
    DropOpsMixin,
    QMainWindow,
):
    def __init__(
        self,
        registry: NodeRegistry,
        settings: AppSettings | None = None,
        autosave: Autosave | None = None,
        library: ModelsLibrary | None = None,
    ) -> None:
        super().__init__()
        self.registry = registry
        # The models library (--models-dir, NODELOOM_MODELS_DIRS, saved roots): the loaders' model picker.
        self.library = (
            library if library is not None else ModelsLibrary([*roots_from_env(), *load_saved_roots()])
        )
        self.settings = settings or AppSettings()
        self.autosave = autosave or Autosave()
        self.path: Path | None = None
        self._force_dirty = False
        self.last_problems: list[Problem] = []
        self.problem_dialog: QWidget | None = None
        self.last_result: object = None
        self._planned: list[str] = []
        self.pending_previews: dict[str, object] = {}  # an output node's last picture until it finishes
        self.resize(1500, 950)
        self.setAcceptDrops(True)

        # Messages name it as the title does; a NestedGraphModel opens subgraphs (app/gui/subgraph_ops.py).
        self.model = NestedGraphModel(registry, Workflow(source="Untitled"))
        self.undo_stack = QUndoStack(self)
        self.scene = GraphScene(self.model, self.undo_stack, self)
        self.view = GraphView(self.scene)
        self.setCentralWidget(self.view)
        self.minimap = Minimap(self.view)
        self.view.corner_overlay = self.minimap
        self.view.installEventFilter(self)
        self.palette = NodePalette(registry, self)
        self.inspector = Inspector(self.model)
        self.output = OutputPanel()
        self.plots = PlotsPanel()
        self.runner = RunController(registry, self)
        self.warmup = Warmup(self)  # torch and the memory manager's modules, off the GUI thread
        self.warmup.memory_ready.connect(self._memory_imports_ready)
        self.queue = QueuePanel()
        self.history_panel = HistoryPanel()
        self.current_run: QueuedRun | None = None
        self._seed_rng = random.Random()
        self.problem_marks_at: int | None = None  # undo index when a refused run marked its problems
        self._find_state: tuple[str, int, int] = ("", -1, 0)  # last search, position, matches
        self.find_bar: FindBar | None = None
        self._build_docks()
        self._build_actions()
        self._build_status_bar()
        self.plan_ui = install_plan(self)  # the live memory plan: node bars, status label, Plan dock
        self.remote = install_remote(self, self.file_menu)  # File > Connect to Server
        self.import_marks = install_import_marks(self)  # File > Import's summary banner and node marks
        self.arrange_action = install_arrange(self)  # Edit > Arrange
        self.subgraph_ops = install_subgraphs(self)  # Edit > Subgraph, the breadcrumb, blueprints

        self.scene.status_message.connect(self.status)
        self.scene.selectionChanged.connect(self._selection_changed)
        self.view.palette_requested.connect(self.open_palette)
        self.view.context_menu_requested.connect(self._fill_context_menu)
        self.palette.node_chosen.connect(self._palette_chose)
        self.scene.wire_dropped.connect(self._wire_dropped)
        self._pending_wire: tuple[str, str, str] | None = None
        self.inspector.edited.connect(self._param_edited)
        self.inspector.palette_requested.connect(self._palette_from_inspector)
        self.inspector.size_hint = self.model_size_for
        self.inspector.model_choices = lambda node_type, param: model_choices(self.library, node_type, param)
        self.inspector.seed_control_changed.connect(self.set_seed_control)
        self.undo_stack.cleanChanged.connect(self._undo_changed)
        self.undo_stack.indexChanged.connect(self._undo_changed)
        self.runner.run_event.connect(self.on_run_event)
        self.runner.telemetry.connect(self.on_telemetry)
        self.runner.run_finished.connect(self.on_run_finished)
        self.runner.run_failed.connect(self.on_run_failed)
        self._stale_timer = QTimer(self)
        self._stale_timer.setSingleShot(True)
        self._stale_timer.setInterval(150)
        self._stale_timer.timeout.connect(self.refresh_stale_states)
        for event in ("param_changed", "connection_created", "connection_removed", "node_ui_changed"):
            self.model.subscribe(event, lambda *_args: self._stale_timer.start())
        self.autosave_timer = QTimer(self)
        self.autosave_timer.setInterval(INTERVAL_MS)
        self.autosave_timer.timeout.connect(self.autosave_now)
        self.autosave_timer.start()
        self.update_title()
        geometry, state = self.settings.q.value("window/geometry"), self.settings.q.value("window/state")
        if geometry is not None:
            self.restoreGeometry(geometry)
        if state is not None:
            self.restoreState(state)
        for name, reason in registry.load_errors:
            self.output.add_log(f"Node pack {name!r} failed to load: {reason}")
        self.history_panel.reopen.connect(self.reopen_history)
        self.history_panel.load(self.settings.output_dir)

    # -- layout -----------------------------------------------------------------------------------

    def _dock(self, title: str, widget: QWidget, area: Qt.DockWidgetArea, name: str) -> QDockWidget:
        dock = QDockWidget(title, self)
        dock.setObjectName(name)
        dock.setWidget(widget)
        dock.setFeatures(
            QDockWidget.DockWidgetFeature.DockWidgetMovable
            | QDockWidget.DockWidgetFeature.DockWidgetClosable
            | QDockWidget.DockWidgetFeature.DockWidgetFloatable
        )
        self.addDockWidget(area, dock)
        return dock

    def _build_docks(self) -> None:
        self.inspector_dock = self._dock(
            "Inspector", self.inspector, Qt.DockWidgetArea.RightDockWidgetArea, "inspector"
        )
        self.output_dock = self._dock("Output", self.output, Qt.DockWidgetArea.RightDockWidgetArea, "output")
        self.plots_dock = self._dock(
            "Live plots", self.plots, Qt.DockWidgetArea.BottomDockWidgetArea, "plots"
        )
        self.history = QUndoView(self.undo_stack)
        self.history.setEmptyLabel("Opened file")
        self.history_dock = self._dock(
            "History", self.history, Qt.DockWidgetArea.RightDockWidgetArea, "history"
        )
        self.tabifyDockWidget(self.inspector_dock, self.history_dock)
        self.queue_dock = self._dock("Run queue", self.queue, Qt.DockWidgetArea.RightDockWidgetArea, "queue")
        self.outputs_dock = self._dock(
            "Output history", self.history_panel, Qt.DockWidgetArea.RightDockWidgetArea, "output-history"
        )
        self.tabifyDockWidget(self.output_dock, self.outputs_dock)
        self.tabifyDockWidget(self.output_dock, self.queue_dock)
        self.output_dock.raise_()
        self.inspector_dock.raise_()
        self.history_dock.hide()  # View > History
        self.setCorner(Qt.Corner.BottomRightCorner, Qt.DockWidgetArea.RightDockWidgetArea)
        self.resizeDocks([self.inspector_dock, self.output_dock], [380, 380], Qt.Orientation.Horizontal)
        self.resizeDocks([self.inspector_dock, self.output_dock], [330, 520], Qt.Orientation.Vertical)
        self.resizeDocks([self.plots_dock], [270], Qt.Orientation.Vertical)

    def _build_status_bar(self) -> None:
        from app.gui.status_bar import StatusBar

        self.setStatusBar(StatusBar())  # long messages elide before the RSS label; tooltip has them whole
        bar = self.statusBar()
        self.progress = QProgressBar()
        self.progress.setFixedWidth(180)
        self.progress.setFormat("%v / %m nodes")
        self.progress.setVisible(False)
        self.memory_label = QLabel("")
        self.memory_label.setObjectName("hint")
        self.server_label = QLabel("")  # "Server: http://..." while runs go to a server
        bar.addPermanentWidget(self.progress)
        bar.addPermanentWidget(self.server_label)
        bar.addPermanentWidget(self.memory_label)
        self.status(
            "Tab or double-click the canvas to add a node · drag from a port to connect · Ctrl+Enter runs"
        )

    def set_seed_control(self, node_id: str, name: str, mode: str) -> None:
        ui = self.model.workflow.ui["nodes"].setdefault(node_id, {})
        ui.setdefault("seed_control", {})[name] = mode
        self._force_dirty = True
        self.update_title()

    def model_size_for(self, node_id: str) -> ImageSize | None:
        """The native size/multiple of the model wired (directly or through reroutes) into `node_id`."""
        from pipelines.diffusion.sizes import size_for_model  # diffusers: only once a size is asked for

        seen: set[str] = set()
        todo = [node_id]
        # An Empty Latent with no model wired in is sized by its sampler's model at run time (nodes.latent_sizing).
        by_sampler = sizing_link(self.model.to_workflow(), self.registry, node_id)
        if by_sampler is not None:
            todo.append(by_sampler.node)
        while todo:
            nid = todo.pop()
            if nid in seen or nid not in self.model.node_ids():
                continue
            seen.add(nid)
            node = self.model.node(nid)
            path = node.params.get("path")
            if nid != node_id and isinstance(path, str) and path:
                size = size_for_model(path)
                if size is not None:
                    return size
            todo.extend(
                link.node
                for name, link in node.inputs.items()
                if name in ("denoiser", "vae", "model", "input")
            )
        return None

    def _palette_from_inspector(self) -> None:
        """Tab in a prompt box: back to the canvas with the palette open, as Tab there does."""
        self.view.setFocus()
        self.open_palette(self.view.mapToScene(self.view.viewport().rect().center()))

    def status(self, message: str) -> None:
        self.statusBar().showMessage(message, 15000)
        if message.startswith("Can't connect"):  # a refusal is shown where the wire was released, too
            QToolTip.showText(QCursor.pos(), message, self.view)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._place_minimap()

    def _toggle_minimap(self) -> None:
        self.minimap.setVisible(self.minimap_action.isChecked())
        self.settings.q.setValue("view/minimap", self.minimap_action.isChecked())
        self._place_minimap()

    def eventFilter(self, watched: object, event: object) -> bool:
        # The canvas changes size when docks move or resize, not only with the window.
        if watched is self.view and getattr(event, "type", lambda: None)() == QEvent.Type.Resize:
            QTimer.singleShot(0, self._place_minimap)
        return super().eventFilter(watched, event)  # type: ignore[arg-type]

    def _place_minimap(self) -> None:
        if not shiboken6.isValid(self.minimap):
            return
        # Inside the canvas's visible area (not under a scroll bar or a dock), bottom right.
        area = self.view.viewport().geometry()
        self.minimap.move(
            QPoint(
                max(0, area.right() - self.minimap.width() - 12),
                max(0, area.bottom() - self.minimap.height() - 12),
            )
        )

    def showEvent(self, event: object) -> None:
        super().showEvent(event)  # type: ignore[arg-type]
        QTimer.singleShot(0, self._place_minimap)
        if self.runner.executor is None:
            self.warmup.start()  # then _memory_imports_ready builds the manager (app/gui/startup.py)

    def remote_running(self) -> bool:
        remote = getattr(self, "remote", None)  # installed after the plan view
        return remote is not None and remote.run.running

    def _memory_imports_ready(self, error: str) -> None:
        if error:
            self.status(f"Memory manager not started: {error}")
            return
        if self.runner.executor is None and not self.start_memory_manager():
            return
        self._start_next_queued()  # a Run pressed while torch was loading

    def start_memory_manager(self) -> bool:
        """Build (or rebuild, after a settings change) the memory manager and executor."""
        if self.runner.running:
            return False
        try:
            self.runner.configure(self.settings.memory, allow_pickle=self.settings.allow_pickle)
        except Exception as exc:  # a bad device or budget string from the settings: say so, keep editing
            self.status(f"Memory manager not started: {exc} (see Settings)")
            return False
        return True

    # -- editing ----------------------------------------------------------------------------------

    def _undo_changed(self, *_args: object) -> None:
        if shiboken6.isValid(self.undo_stack):  # the stack emits while it is destroyed with the window
            self.update_title()
            self.clear_stale_problem_marks()

    def open_settings(self) -> None:
        from app.gui.models_settings import library_after_settings

        saved = load_saved_roots()
        fixed = [r for r in self.library.roots if r not in set(ModelsLibrary(saved).roots)]
        if SettingsDialog(self.settings, self, fixed).exec():
            self.library = library_after_settings(self.library, saved)  # the model picker lists the new roots
            if self.runner.running:
                self.status("Settings saved; they apply to the next run")
            elif self.start_memory_manager():
                self.plan_ui.request()  # a budget or policy changed: plan again
                self.plots.new_series()
                self.status(
                    f"Settings saved: device {self.settings.memory.device}, "
                    f"policy {self.settings.memory.policy}"
                )

    def show_shortcuts(self) -> None:
        """F1: a table built from the actions themselves (app/gui/menus.py), so it never misses one."""
        self.shortcuts_dialog = self._shortcuts_dialog()
        self.shortcuts_dialog.show()

    # -- closing ----------------------------------------------------------------------------------

    def closeEvent(self, event: QCloseEvent) -> None:
        if not self.confirm_discard():
            event.ignore()
            return
        self.plan_ui.controller.shutdown()
        if self.runner.running:
            self.runner.cancel()
            self.runner.wait(10)
        # A node still busy after the wait (a long forward pass ignores the cancel until its next step) keeps
        # its models: close() then leaves the memory manager to the worker instead of freeing them under it.
        self.runner.close()
        self.autosave.clear()
        self.settings.q.setValue("window/geometry", self.saveGeometry())
        self.settings.q.setValue("window/state", self.saveState())
        event.accept()
