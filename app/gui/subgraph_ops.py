"""Subgraphs in the editor: Make Subgraph (Ctrl+Shift+G, or ComfyUI's Ctrl+Shift+E), open one to edit inside
(with a breadcrumb to go back), show an inner field on the subgraph node, expand it back, save it as a
blueprint and add blueprints from the palette, and a run's inner states on the subgraph node. Each edit is
one undo step on the window's undo stack.

Lives here: `SubgraphOps`, `install`. Imports Qt, `app.gui.theme`,
`app.gui.inspector` (ParamEditor), `app.gui.node_item`, `app.gui.subgraph_commands`, `app.gui.subgraph_item`,
`app.gui.subgraph_blueprints`, `app.gui.subgraph_view` (breadcrumb, run states), `nodes.subgraph`, `nodes.subgraph_edit` (the window's model is a
`NestedGraphModel`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QEvent, QObject, QPointF, Qt
from PySide6.QtGui import QAction, QContextMenuEvent, QKeySequence, QUndoCommand
from PySide6.QtWidgets import QLabel, QMenu, QWidget

from app.gui.inspector import ParamEditor
from app.gui.node_item import ROW, NodeItem
from app.gui.node_thumbnail import thumbnail_image
from app.gui.run_worker import TimedEvent
from app.gui.subgraph_blueprints import BlueprintLibrary
from app.gui.subgraph_commands import EnterCommand, LeaveCommand, PromoteCommand, ReplaceLevelCommand
from app.gui.subgraph_item import BoundaryTag
from app.gui.subgraph_view import ROOT_NAME, Breadcrumb, summary_state
from nodes.events import NodePreview
from nodes.subgraph import expand_instance, expand_subgraphs, is_instance, make_subgraph
from nodes.subgraph_edit import NestedGraphModel

if TYPE_CHECKING:
    from app.gui.main_window import MainWindow

DEFAULT_TITLE = "New Subgraph"  # ComfyUI's name for a subgraph made from a selection


class _InspectorMenus(QObject):
    """Right-click on a field's label in the inspector: "Show on subgraph node" while a subgraph is open."""

    def __init__(self, ops: SubgraphOps) -> None:
        super().__init__(ops.window)
        self.ops = ops

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ContextMenu and isinstance(event, QContextMenuEvent):
            viewport = self.ops.window.inspector.viewport()
            widget = viewport.childAt(event.pos())
            menu = self.ops.inspector_menu(widget)
            if menu is not None:
                menu.exec(event.globalPos())
                return True
        return False


class SubgraphOps:
    """The window's subgraph actions; `install` builds one and adds its menu entries."""

    def __init__(self, window: MainWindow) -> None:
        self.window = window
        self.model: NestedGraphModel = window.model  # type: ignore[assignment]
        self.library = BlueprintLibrary(window)
        self.breadcrumb = Breadcrumb(self, window.view)
        self._views: dict[int, dict[str, object]] = {}  # depth -> the view there, to come back to
        self._depth = 0
        self.model.subscribe("reset", self._level_changed)
        window.scene.subgraph_open_requested.connect(self.open_subgraph)
        window.scene.hidden_run_state.connect(self.show_inner_state)
        window.runner.run_event.connect(self._run_event)
        self.breadcrumb.refresh()

    # -- levels -----------------------------------------------------------------------------------

    def _level_changed(self) -> None:
        depth = self.model.depth()
        if depth != self._depth:
            view = self.window.view
            if depth > self._depth:
                self._views[self._depth] = view.view_state()
                view.fit()
            elif not view.restore_view_state(self._views.get(depth, {})):
                view.fit()
            self._depth = depth
        self.breadcrumb.refresh()
        self.tag_boundary()

    def tag_boundary(self) -> list[BoundaryTag]:
        """Inside a subgraph: tag the inner ports its node's inputs feed and its outputs come from."""
        if not self.model.depth():
            return []
        level = self.model.levels()[-1]
        d = level.outer.subgraphs.get(level.def_id, {})
        items = self.window.scene.node_items
        tags = [
            BoundaryTag(items[node], port, "in", entry["name"])
            for entry in d.get("inputs", [])
            for node, port in entry["targets"]
            if node in items
        ]
        tags += [
            BoundaryTag(items[e["source"][0]], e["source"][1], "out", e["name"])
            for e in d.get("outputs", [])
            if e["source"][0] in items
        ]
        return tags

    def _push_navigation(self, command: QUndoCommand) -> None:
        """Opening or leaving a subgraph changes nothing in the file: a saved graph stays saved."""
        stack = self.window.undo_stack
        clean = stack.isClean()
        stack.push(command)
        if clean:
            stack.setClean()

    def open_subgraph(self, instance_id: str | None = None) -> bool:
        ids = [instance_id] if instance_id else self.window.scene.selected_node_ids()
        ids = [nid for nid in ids if is_instance(self.model.workflow, nid)]
        if not ids:
            self.window.status("Select a subgraph node to open it")
            return False
        title = self.window.scene.node_items[ids[0]].title()
        self._push_navigation(EnterCommand(self.model, ids[0], title))
        self.window.status(f"Editing inside {title}: edits change every instance · {self.breadcrumb.text()}")
        return True

    def leave_to(self, depth: int = 0) -> None:
        levels = self.model.depth() - depth
        if levels <= 0:
            return
        names = [ROOT_NAME, *(level.title for level in self.model.levels())]
        self._push_navigation(LeaveCommand(self.model, levels, names[depth]))

    # -- run states -------------------------------------------------------------------------------

    def show_inner_state(self, run_id: str) -> None:
        """A run names the nodes it runs by their path ("prompts/positive"): show each on the node the
        canvas has for it, an instance summing up its inner nodes (running while one runs, done with their
        total time once all are done, the first error)."""
        scene = self.window.scene
        prefix, shown = self._prefix(), self.shown_for(run_id)
        if shown is None:
            return
        if prefix + shown == run_id:  # a node of the open subgraph itself
            scene.run_states[shown] = scene.run_states[run_id]
            scene.node_items[shown].set_state(scene.run_states[run_id])
            return
        inner = f"{prefix}{shown}/"
        states = {k[len(inner) :]: s for k, s in scene.run_states.items() if k.startswith(inner)}
        planned = [n for n in getattr(self.window, "_planned", []) if n.startswith(inner)]
        scene.run_states[shown] = state = summary_state(states, len(planned))
        scene.node_items[shown].set_state(state)

    def _prefix(self) -> str:
        """How a run names the nodes of the open level: "prompts/" inside Prompts, "" at the root."""
        return "".join(f"{level.instance}/" for level in self.model.levels())

    def shown_for(self, run_id: str) -> str | None:
        """The node on the canvas a run's node id ("prompts/save") is, or is inside; None if neither."""
        prefix = self._prefix()
        if not run_id.startswith(prefix):
            return None
        shown = run_id[len(prefix) :].split("/", 1)[0]
        return shown if shown in self.window.scene.node_items else None

    def canvas_id(self, run_id: str) -> str | None:
        """The canvas node a run's node id is itself ("prompts/sampler" is "sampler" inside Prompts), or None."""
        shown = self.shown_for(run_id)
        return shown if shown is not None and self._prefix() + shown == run_id else None

    def _run_event(self, timed: TimedEvent) -> None:
        """A Save or Preview node's last picture from inside a subgraph shows on the subgraph node too, as
        ComfyUI shows its inner previews there."""
        event = timed.event
        if not isinstance(event, NodePreview) or not event.final:
            return
        shown = self.shown_for(event.node_id)
        if shown is None or event.node_id == self._prefix() + shown:  # on the canvas itself: run_ops shows it
            return
        inner = expand_subgraphs(self.model.to_workflow()).nodes.get(event.node_id)
        spec = self.model.base_registry.get(inner.type) if inner is not None else None
        if spec is not None and spec.is_output:
            self.window.scene.node_items[shown].set_thumbnail(thumbnail_image(event.image))

    # -- edits ------------------------------------------------------------------------------------

    def make_subgraph(self, title: str = DEFAULT_TITLE) -> str | None:
        ids = self.window.scene.selected_node_ids()
        if not ids:
            self.window.status("Select the nodes to put in a subgraph")
            return None
        wf, instance = make_subgraph(self.model.workflow, ids, title=title)
        count = len(ids)
        self.window.undo_stack.push(
            ReplaceLevelCommand(self.model, wf, f"Make subgraph of {count} node{'s' if count != 1 else ''}")
        )
        self._select([instance])
        self.window.status(f"Made {instance} from {count} node(s): double-click it to edit inside")
        return instance

    def expand_selected(self) -> list[str]:
        ids = [nid for nid in self.window.scene.selected_node_ids() if is_instance(self.model.workflow, nid)]
        if not ids:
            self.window.status("Select a subgraph node to expand it")
            return []
        wf, added = self.model.workflow, []
        for nid in ids:
            wf, new = expand_instance(wf, nid)
            added += new
        self.window.undo_stack.push(ReplaceLevelCommand(self.model, wf, f"Expand {', '.join(ids)}"))
        self._select(added)
        self.window.status(f"Expanded {', '.join(ids)} into {len(added)} node(s)")
        return added

    def promote(self, node_id: str, param: str) -> bool:
        if self.model.depth() == 0:
            self.window.status("Open a subgraph to show its fields on the subgraph node")
            return False
        if (node_id, param) in self.model.promoted():
            self.window.status(f"{node_id}.{param} is already on the subgraph node")
            return False
        self.window.undo_stack.push(PromoteCommand(self.model, node_id, param))
        self.window.status(f"{node_id}.{param} now shows on {self.model.levels()[-1].title}")
        return True

    def demote(self, node_id: str, param: str) -> bool:
        if (node_id, param) not in self.model.promoted():
            return False
        self.window.undo_stack.push(PromoteCommand(self.model, node_id, param, show=False))
        self.window.status(f"{node_id}.{param} is no longer on {self.model.levels()[-1].title}")
        return True

    def _field_action(self, menu: QMenu, node_id: str, param: str) -> None:
        """ "Show on subgraph node", or "Remove from subgraph node" for a field already there."""
        if (node_id, param) in self.model.promoted():
            menu.addAction("Remove from subgraph node", lambda: self.demote(node_id, param))
        else:
            menu.addAction("Show on subgraph node", lambda: self.promote(node_id, param))

    def _select(self, ids: list[str]) -> None:
        scene = self.window.scene
        scene.clearSelection()
        for nid in ids:
            if nid in scene.node_items:
                scene.node_items[nid].setSelected(True)

    # -- menus ------------------------------------------------------------------------------------

    def param_at(self, scene_pos: QPointF) -> tuple[str, str] | None:
        """(node, param) of the field row under `scene_pos` on the canvas, if any."""
        for item in self.window.scene.items(scene_pos):
            while item.parentItem() is not None:
                item = item.parentItem()
            if isinstance(item, NodeItem) and item.spec is not None and not item.is_collapsed():
                y = item.mapFromScene(scene_pos).y()
                for param in item.spec.params:
                    port = item.inputs.get(param.name)
                    if port is not None and abs(port.y() - y) <= ROW / 2:
                        return item.node_id, param.name
                return None
        return None

    def fill_context_menu(self, menu: QMenu, scene_pos: QPointF) -> None:
        """Added after the window's own entries (app/gui/edit_ops.py) for the item under the cursor."""
        ids = self.window.scene.selected_node_ids()
        menu.addSeparator()
        field = self.param_at(scene_pos) if self.model.depth() else None
        if field is not None:
            self._field_action(menu, *field)
        if ids:
            menu.addAction(self.make_action)
        if any(is_instance(self.model.workflow, nid) for nid in ids):
            menu.addAction(self.open_action)
            menu.addAction(self.expand_action)
            menu.addAction(self.library.save_action)
        if self.model.depth():
            menu.addAction(self.back_action)

    def inspector_menu(self, widget: QWidget | None) -> QMenu | None:
        """The menu for a right-click on `widget` in the inspector: a field of an inner node while open."""
        node_id = self.window.inspector.node_id
        spec = self.model.spec(node_id) if node_id is not None else None
        if self.model.depth() == 0 or spec is None:
            return None
        names = {p.name for p in spec.params}
        param = None
        while widget is not None and param is None:
            if isinstance(widget, ParamEditor):
                param = widget.param.name
            elif isinstance(widget, QLabel) and widget.text() in names:
                param = widget.text()
            widget = widget.parentWidget()
        if param is None:
            return None
        menu = QMenu(self.window.inspector)
        self._field_action(menu, node_id, param)
        return menu


def install(window: MainWindow) -> SubgraphOps:
    """Edit > Make Subgraph, Open / Expand Subgraph, Save as Blueprint; the breadcrumb and right-click menus."""
    ops = SubgraphOps(window)

    def action(text: str, slot: object, keys: str | list[str] | None, tip: str) -> QAction:
        act = QAction(text, window)
        if keys:
            keys = keys if isinstance(keys, list) else [keys]
            act.setShortcuts([QKeySequence(k) for k in keys])
            act.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
            tip += f" ({' or '.join(keys)})"
        act.setToolTip(tip)
        act.triggered.connect(slot)  # type: ignore[arg-type]
        window.view.addAction(act)
        return act

    ops.make_action = action(
        "Make Su&bgraph",
        lambda: ops.make_subgraph(),
        # ComfyUI's frontend binds its "Convert Selection to Subgraph" to Ctrl+Shift+E; G as in "group".
        ["Ctrl+Shift+G", "Ctrl+Shift+E"],
        "Put the selected nodes in one subgraph node (wires across the selection become its ports)",
    )
    ops.open_action = action(
        "&Open Subgraph", lambda: ops.open_subgraph(), "Ctrl+Shift+O", "Edit inside the selected subgraph"
    )
    ops.expand_action = action(
        "E&xpand Subgraph",
        lambda: ops.expand_selected(),
        "Ctrl+Shift+U",
        "Put the selected subgraph's nodes back in the graph (ComfyUI's Unpack Subgraph)",
    )
    ops.back_action = action(
        "Back to &Parent Graph",
        lambda: ops.leave_to(ops.model.depth() - 1),
        "Alt+Up",
        "Leave the open subgraph",
    )
    menu = window.edit_menu.addMenu("S&ubgraph")
    for act in (ops.make_action, ops.open_action, ops.expand_action, ops.back_action):
        menu.addAction(act)
    menu.addSeparator()
    menu.addAction(ops.library.save_action)
    window.view.context_menu_requested.connect(ops.fill_context_menu)
    ops.inspector_filter = _InspectorMenus(ops)
    window.inspector.viewport().installEventFilter(ops.inspector_filter)
    return ops
