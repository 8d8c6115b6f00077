"""Executor events -> ComfyUI's websocket messages, and what each run made (its `outputs` per node).

Lives here: `RunMessages`, `PICTURES`. Imports `nodes.events`, `nodes.files`, `nodes.png` (previews),
`app.server.comfy_shapes`.

The messages ComfyUI's clients follow, one `{"type", "data"}` each: `executing` `{node, display_node,
prompt_id}` when a node starts, `progress` `{value, max, prompt_id, node}` per sampling step or token (not for
loads: a client's bar means steps), and `executed` `{node, display_node, output, prompt_id}` for a node that
made pictures or text. The start, cached, end (`execution_success`/`_error`/`_interrupted`) and the final
`executing` with `node: null` are sent by the worker around the run. Called on the run thread; `send` must
be thread-safe.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.server.comfy_shapes import image_ref
from nodes.events import (
    NodeFailed,
    NodeFinished,
    NodePreview,
    NodeProgress,
    NodeStarted,
    NodeText,
    progress_kind,
)
from nodes.files import write_new_output

PICTURES = (".png", ".jpg", ".jpeg", ".webp")
Send = Callable[[str, dict[str, Any]], None]


class RunMessages:
    """One run's translation: call it with each executor event."""

    def __init__(self, prompt_id: str, send: Send, out_dir: Path, temp_dir: Path) -> None:
        self.prompt_id = prompt_id
        self.send = send
        self.out_dir, self.temp_dir = out_dir, temp_dir
        self.outputs: dict[str, dict[str, list[Any]]] = {}
        self.texts: dict[str, str] = {}
        self.executed: list[str] = []
        self.current: str | None = None
        self.failure: NodeFailed | None = None
        self._previews: dict[str, list[dict[str, str]]] = {}
        self._pending: dict[str, list[Any]] = {}  # final previews of the node running, until it finishes

    def __call__(self, event: Any) -> None:
        if isinstance(event, NodeStarted):
            self.current = event.node_id
            self.send(
                "executing",
                {"node": event.node_id, "display_node": event.node_id, "prompt_id": self.prompt_id},
            )
        elif isinstance(event, NodeProgress):
            if progress_kind(event.kind).timed:
                self.send(
                    "progress",
                    {
                        "value": event.step,
                        "max": event.total,
                        "prompt_id": self.prompt_id,
                        "node": event.node_id,
                    },
                )
        elif isinstance(event, NodePreview) and event.final:
            self._pending.setdefault(event.node_id, []).append(event.image)
        elif isinstance(event, NodeText):
            self.texts[event.node_id] = self.texts.get(event.node_id, "") + event.delta
        elif isinstance(event, NodeFinished):
            self.executed.append(event.node_id)
            if not any(Path(f).suffix.lower() in PICTURES for f in event.files):
                for image in self._pending.get(event.node_id, []):  # a saved picture needs no preview too
                    self._save_preview(event.node_id, image)
            self._pending.pop(event.node_id, None)
            output = self.node_output(event.node_id, event.files)
            if output:
                self.outputs[event.node_id] = output
                self.send(
                    "executed",
                    {
                        "node": event.node_id,
                        "display_node": event.node_id,
                        "output": output,
                        "prompt_id": self.prompt_id,
                    },
                )
        elif isinstance(event, NodeFailed):
            self.failure = event

    def node_output(self, node_id: str, files: tuple[str, ...] | list[str]) -> dict[str, list[Any]]:
        """ComfyUI's `output` of a node: `images` (files in the output folder, previews in temp), `text`."""
        images = [
            ref
            for f in files
            if Path(f).suffix.lower() in PICTURES
            and (ref := image_ref(f, self.out_dir, "output")) is not None
        ]
        images += self._previews.get(node_id, [])
        output: dict[str, list[Any]] = {}
        if images:
            output["images"] = images
        if node_id in self.texts:
            output["text"] = [self.texts[node_id]]
        return output

    def _save_preview(self, node_id: str, image: Any) -> None:
        """A PreviewImage picture, kept in the temp folder so `/view?type=temp` serves it, as ComfyUI does."""
        try:
            path = write_new_output(
                self.temp_dir,
                f"preview_{re.sub(r'[^A-Za-z0-9]', '', self.prompt_id)[:8] or 'run'}",
                ".png",
                lambda p: image.save(p, format="PNG"),
            )
        except (OSError, ValueError, AttributeError):
            return  # a preview that cannot be kept is not worth failing the run for
        ref = image_ref(path, self.temp_dir, "temp")
        if ref is not None:
            self._previews.setdefault(node_id, []).append(ref)
