"""The output history's window actions: record what a run made, reopen the graph that made an output,
drop a picture from the history onto the canvas.

Lives here: `HistoryOpsMixin`. Imports Qt-free helpers of `app.gui.history`; the panel itself is there.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from app.gui.history import HistoryEntry, append_history
from app.history_file import video_poster, with_figures
from nodes.run_figures import figures_line
from nodes.workflow import WorkflowError

if TYPE_CHECKING:
    from app.gui.main_window import MainWindow


class HistoryOpsMixin:
    def record_history(self: MainWindow, result: Any) -> None:
        """Keep what a run made (pictures, texts) with its workflow, seeds and report, across restarts.

        Only what this run made: a node served from the cache lists the file an earlier run wrote, so a
        re-run of an unchanged graph adds no entry (the earlier entry already holds that file).
        """
        self.output.finish_run(
            [(nid, f) for nid, r in result.nodes.items() if r.status == "cached" for f in r.files]
        )
        job = self.current_run
        files = [f for r in result.nodes.values() if r.status != "cached" for f in r.files]
        texts = dict(self.output.text_by_node)
        report = with_figures(result.to_json())  # frames, videos/hour, images/min: nodes.run_figures
        if line := figures_line(report["figures"]):  # the CLI's summary line, in the Output dock's log
            self.output.add_log(line)
        if job is None or not (files or texts):
            return
        wf = job.workflow
        seeds = {
            f"{nid}.{p.name}": wf.nodes[nid].params[p.name]
            for nid in wf.nodes
            if (spec := self.registry.get(wf.nodes[nid].type)) is not None
            for p in spec.params
            if p.kind == "seed" and isinstance(wf.nodes[nid].params.get(p.name), int)
        }
        graph = (job.source or wf).to_dict()  # as edited: bypassed/muted nodes come back on reopen
        entry = HistoryEntry(time.time(), job.label, graph, seeds, files, texts, report)
        entry.poster = video_poster(self.settings.output_dir, report)
        try:
            append_history(self.settings.output_dir, entry)
        except OSError as exc:
            self.output.add_log(f"Could not write the output history: {exc}")
        self.history_panel.add(entry)

    def reopen_history(self: MainWindow, entry: HistoryEntry) -> None:
        """Open the exact graph that made an output (as a new, unsaved file)."""
        from app.gui.file_ops import read_for_editing

        if not self.confirm_discard():
            return
        try:
            wf, _soft = read_for_editing(entry.workflow, self.registry, "Untitled (from the output history)")
        except WorkflowError as exc:
            self.show_problems("Cannot reopen", exc.problems)
            return
        self.set_workflow(wf, None)
        self.status(f"Reopened the graph of {entry.label} from the output history")

    def drop_history_picture(self: MainWindow, file: str, scene_pos: object) -> str | None:
        """A picture dragged from the history: into the Load Image node under it, else a new Load Image."""
        from app.gui.commands import SetParamCommand

        item = self.scene.itemAt(scene_pos, self.view.transform())  # type: ignore[arg-type]
        while item is not None and item.parentItem() is not None:
            item = item.parentItem()
        target = next((nid for nid, it in self.scene.node_items.items() if it is item), None)
        if target is not None and self.model.node(target).type == "LoadImage":
            self.undo_stack.push(SetParamCommand(self.model, target, "path", file))
            return target
        node = self.scene.add_node("LoadImage", scene_pos)  # type: ignore[arg-type]
        self.undo_stack.push(SetParamCommand(self.model, node, "path", file))
        return node
