"""Running from the main window: Run (Ctrl+Enter) and Cancel (Esc), node states on the canvas, outputs,
plots and status bar fed from the run controller's signals (all on the GUI thread).

Lives here: `RunOpsMixin` (Run, the run queue, seed control after each run). Imports Qt, `app.gui.*`, `nodes.events`, `nodes.workflow`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from PySide6.QtWidgets import QMessageBox

from app.gui.node_item import NodeRunState
from app.gui.node_thumbnail import thumbnail_image
from app.gui.output_panel import is_picture_file
from app.gui.run_queue import QueuedRun, next_seed, seed_controls
from app.gui.run_worker import TimedEvent
from app.gui.subgraph_seeds import apply_inner_seeds
from nodes.events import (
    NodeCached,
    NodeFailed,
    NodeFinished,
    NodeLog,
    NodePreview,
    NodeProgress,
    NodeStarted,
    NodeText,
    RunFinished,
    RunStarted,
    describe_progress,
    progress_kind,
)
from nodes.model_names import resolve_model_names
from nodes.modes import prepare_run, skipped_note
from nodes.workflow import Problem

if TYPE_CHECKING:
    from app.gui.main_window import MainWindow

MIB = 1024 * 1024


class RunOpsMixin:
    def run_workflow(self: MainWindow) -> bool:
        """Run the graph as it is now; while a run is going, queue it (Run queue dock)."""
        source = self.model.to_workflow()
        # Bypassed/muted nodes set aside; a bypass with nothing to pass on says so (as `app --run`).
        plan = prepare_run(source, self.registry)
        wf, problems = plan.workflow, plan.problems
        if not wf.nodes:
            self.status("Nothing to run: add nodes first (Tab)")
            return False
        if not problems and self.remote.connected:  # the server resolves model names in its own folders
            if not self.remote.start(wf.to_dict(), self._run_label(wf)):
                return False
            self._apply_seed_controls(wf)
            return True
        if not problems:
            # Names relative to a models-library root ("sd15.safetensors"), as `app --run` resolves them;
            # names an imported ComfyUI file gave stay inside the roots, even when none is set.
            problems = resolve_model_names(wf, self.library)
        if problems:
            self._mark_problems(problems)
            self.show_problems("Cannot run yet", problems, "Fix these before running:")
            return False
        label = self._run_label(wf)
        if not self.warmup.imported:  # torch still loading behind the window: the run starts when it is in
            self.warmup.start()
            self.queue.add(QueuedRun(wf, label, source=source))
            self.status(f"Starting up: {label} runs once torch is loaded")
            self.output.add_log(f"Queued {label}: it starts once the libraries are loaded")
            self._apply_seed_controls(wf)
            return True
        if self.runner.running:
            self.queue.add(QueuedRun(wf, label, source=source))
            self.queue_dock.show()
            self.status(f"Queued: {label} ({len(self.queue.jobs)} waiting)")
            self._apply_seed_controls(wf)
            return True
        if not self._start_run(wf, label, source):
            return False
        self._apply_seed_controls(wf)
        return True

    def _mark_skipped(self: MainWindow, source: Any) -> None:
        """Nodes no output needs are left out of the run (as ComfyUI does): marked on the canvas and logged."""
        skipped = prepare_run(source, self.registry).skipped if source is not None else []
        for nid in skipped:
            self.scene.set_run_state(nid, NodeRunState("skipped", message="no output needs this node"))
        note = skipped_note(source, self.registry, skipped)
        if note:
            self.output.add_log(note[0].upper() + note[1:])

    def _run_label(self: MainWindow, wf: Any) -> str:
        name = self.path.name if self.path else (self.template_name or "Untitled")
        seeds = [
            f"{nid}.{p.name}={wf.nodes[nid].params.get(p.name)}"
            for nid in wf.nodes
            if (spec := self.registry.get(wf.nodes[nid].type)) is not None
            for p in spec.params
            if p.kind == "seed" and p.name not in wf.nodes[nid].inputs
        ]
        return name + (f" ({', '.join(seeds[:2])})" if seeds else "")

    def _apply_seed_controls(self: MainWindow, wf: Any) -> None:
        """After queueing a run: fixed seeds stay, increment adds one, randomize draws a new one."""
        for (run_id, param), mode in seed_controls(wf).items():
            nid = self.subgraph_ops.canvas_id(run_id)  # a run names an open subgraph's nodes by path
            if nid is None or param in self.model.node(nid).inputs:
                continue
            value = self.model.node(nid).params.get(param)
            if isinstance(value, int):
                self.model.set_param(nid, param, next_seed(value, mode, self._seed_rng))
        if apply_inner_seeds(self.model, wf, self._seed_rng):  # seeds inside subgraphs (their definitions)
            self._force_dirty = True
            self.update_title()

    def _start_run(self: MainWindow, wf: Any, label: str, source: Any = None) -> bool:
        try:
            self.runner.configure(self.settings.memory, allow_pickle=self.settings.allow_pickle)
        except Exception as exc:  # a bad device string or budget: tell the user, keep the editor alive
            QMessageBox.critical(
                self,
                "Cannot start the memory manager",
                f"{type(exc).__name__}: {exc}\n\nCheck Settings → Device and budgets.",
            )
            return False
        self.scene.clear_run_states()
        self.problem_marks_at = None  # this run's own states stay after edits
        for nid in self.runner.executor.plan(wf):
            self.scene.set_run_state(nid, NodeRunState("queued"))
        self.output.new_run()
        self.plots.new_run()
        self.output.add_log(
            f"Run started ({len(wf.nodes)} nodes, device {self.settings.memory.device}, "
            f"policy {self.settings.memory.policy})"
        )
        self._mark_skipped(source)
        # The graph as the user sees it (reroutes, bypassed and skipped nodes too) goes into saved pictures.
        self.runner.embedded_workflow = source.to_dict() if source is not None else None
        self.runner.start(wf, self.settings.output_dir)
        self.current_run = QueuedRun(wf, label, source=source)
        self.queue.set_running(label)
        self._set_running(True)
        return True

    def _start_next_queued(self: MainWindow) -> None:
        while self.queue.jobs and not self.runner.running:
            job = self.queue.pop()
            if job is not None and self._start_run(job.workflow, job.label, job.source):
                return

    def cancel_run(self: MainWindow) -> None:
        if self.remote.run.running:
            self.remote.run.cancel()
            self.status("Cancelling the run on the server…")
        elif self.runner.running:
            self.runner.cancel()
            self.status("Cancelling… (stops at the next step)")

    def _set_running(self: MainWindow, running: bool) -> None:
        # Run stays enabled while running: it queues the graph as it is then.
        self.cancel_action.setEnabled(running)
        if not running:
            self.queue.set_running(None)
        self.progress.setVisible(running)
        if running:
            self.progress.setRange(0, 0)

    def _mark_problems(self: MainWindow, problems: list[Problem]) -> None:
        self.scene.clear_run_states()
        for p in problems:
            # A node inside a subgraph ("prompts/positive") marks its subgraph node (app/gui/subgraph_ops.py).
            if p.node is not None:
                self.scene.set_run_state(p.node, NodeRunState("error", message=f"{p.field}: {p.reason}"))
        self.problem_marks_at = self.undo_stack.index()

    def clear_stale_problem_marks(self: MainWindow) -> None:
        """A refused run's marks describe the graph as it was: the next edit (or undo) takes them away."""
        marked_at = self.problem_marks_at
        if marked_at is not None and self.undo_stack.index() != marked_at:
            self.problem_marks_at = None
            self.scene.clear_run_states()

    # -- events from the worker -------------------------------------------------------------------

    def on_run_event(self: MainWindow, timed: TimedEvent) -> None:
        self.plots.add_run_event(timed)
        event: Any = timed.event
        states = self.scene.run_states
        if isinstance(event, RunStarted):
            self._planned = list(event.node_ids)
            self.progress.setRange(0, max(1, len(event.node_ids)))
            self.progress.setValue(0)
            self._text_brought_forward = False
        elif isinstance(event, NodeStarted):
            self.scene.set_run_state(event.node_id, NodeRunState("running"))
            self.status(f"Running {event.node_id}…")
        elif isinstance(event, NodeProgress):
            kind = progress_kind(event.kind)
            if kind.unit in ("bytes", "%") and event.total and event.step >= event.total:
                # A finished load or conversion: the node works on with nothing left to count, and a frozen
                # "loading vae 0.3/0.3 MiB · 0 B/s" would read as stuck.
                self.scene.set_run_state(event.node_id, NodeRunState("running"))
                self.status(f"{event.node_id}: {kind.verb} {event.label} done; running…")
                return
            short, long = describe_progress(event)  # the same wording as `app --run` prints
            self.scene.set_run_state(
                event.node_id, NodeRunState("running", event.step, event.total, message=short)
            )
            self.status(f"{event.node_id}: {long}")
        elif isinstance(event, NodeCached):
            self.scene.set_run_state(event.node_id, NodeRunState("cached"))
            self._advance()
        elif isinstance(event, NodeFinished):
            self.scene.set_run_state(event.node_id, NodeRunState("done", seconds=event.seconds))
            self.status(f"{event.node_id} finished in {event.seconds:.2f} s")
            for path in event.files:
                self.output.add_file(event.node_id, path)
            preview = self.pending_previews.pop(event.node_id, None)
            if preview is not None and not any(is_picture_file(f) for f in event.files):
                self.output.add_preview_picture(event.node_id, preview)
            if self.inspector.node_id == event.node_id:
                self.show_in_inspector(event.node_id)
            self.output.add_log(
                f"{event.node_id} finished in {event.seconds:.2f} s"
                + (f", wrote {len(event.files)} file(s)" if event.files else "")
            )
            self._advance()
        elif isinstance(event, NodeFailed):
            # The node shows its own message; the log and status bar name it (one wording: failure_text).
            self.scene.set_run_state(
                event.node_id, NodeRunState("error", seconds=event.seconds, message=event.message)
            )
            self.output.add_log(f"ERROR: {event.text}")
            self.status(event.text.splitlines()[0])
            self.scene.clearSelection()
            if event.node_id in self.scene.node_items:
                self.scene.node_items[event.node_id].setSelected(True)
                self.view.centerOn(self.scene.node_items[event.node_id])
            self.show_in_inspector(event.node_id)
        elif isinstance(event, NodePreview):
            self.output.show_preview(event.node_id, event.image, event.final)
            spec = (
                self.registry.get(self.model.node(event.node_id).type)
                if event.node_id in self.model.node_ids()
                else None
            )
            if event.final and spec is not None and spec.is_output and event.node_id in self.scene.node_items:
                # A Save or Preview node shows its last picture on the node, as ComfyUI does.
                self.scene.node_items[event.node_id].set_thumbnail(thumbnail_image(event.image))
                # And in the Output strip, unless the node saves it (its file goes there): see NodeFinished.
                self.pending_previews[event.node_id] = event.image
        elif isinstance(event, NodeText):
            self.output.append_text(event.node_id, event.delta)
            # Once per run, so a user who turns to another tab while the text streams is left there.
            if event.delta and not getattr(self, "_text_brought_forward", False):
                self._text_brought_forward = True
                self.output.setCurrentIndex(1)
                self.output_dock.raise_()  # in front of the Outputs history tabbed with it
        elif isinstance(event, NodeLog):
            self.output.add_log(f"{event.node_id}: {event.message}")
        elif isinstance(event, RunFinished):
            for nid, state in list(states.items()):
                if state.status in ("queued", "running"):
                    self.scene.set_run_state(nid, NodeRunState("cancelled" if event.cancelled else ""))

    def _advance(self: MainWindow) -> None:
        self.progress.setValue(self.progress.value() + 1)

    def on_run_finished(self: MainWindow, result: Any) -> None:
        self._set_running(False)
        self.last_result = result
        self.record_history(result)
        if result.ok:
            self.status(f"Done in {result.seconds:.2f} s")
            self.output.add_log(f"Run finished in {result.seconds:.2f} s")
        elif result.cancelled:
            self.status("Run cancelled; the graph is unchanged")
            self.output.add_log("Run cancelled")
        else:
            self.status(f"Run failed: {(result.error or '').splitlines()[0]}")
            self.output.add_log(f"Run failed: {result.error}")
        self._start_next_queued()

    def on_run_failed(self: MainWindow, message: str, problems: list[Problem] | None) -> None:
        self._set_running(False)
        self.last_result = None
        if problems:
            self._mark_problems(problems)
            self.show_problems("Cannot run", problems)
        else:
            self.output.add_log(f"Internal error: {message}")
            QMessageBox.critical(self, "Run failed", message[:2000])
        self._start_next_queued()

    def on_telemetry(self: MainWindow, records: list[Any]) -> None:
        self.plots.add_records(records)
        for record in reversed(records):
            if hasattr(record, "host_rss"):
                device = (
                    ""
                    if record.device_allocated == record.host_rss
                    else f" · device {record.device_allocated / MIB:,.0f} MiB"
                )
                self.memory_label.setText(
                    f"RSS {record.host_rss / MIB:,.0f} MiB{device} · budget {record.budget / MIB:,.0f} MiB"
                )
                break

    def refresh_stale_states(self: MainWindow) -> None:
        """After an edit, nodes whose last result no longer matches the graph lose their done/cached badge."""
        if self.runner.running:
            return
        states = self.scene.run_states
        shown = [nid for nid, s in states.items() if s.status in ("done", "cached")]
        if not shown:
            return
        # The graph as it runs (reroutes joined, unsized latents wired to their sampler's model).
        still = self.runner.cached_node_ids(prepare_run(self.model.to_workflow(), self.registry).workflow)
        for nid in shown:
            if nid not in still:
                self.scene.set_run_state(nid, NodeRunState())
