"""Events the executor emits while it runs a workflow.

Lives here: one frozen dataclass per event and the `RunEvent` union. Imports nothing from Nodeloom.
The headless CLI prints them; the GUI turns them into queued Qt signals. They are values, not strings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RunStarted:
    run_index: int
    node_ids: tuple[str, ...]  # the nodes this run needs, in execution order


@dataclass(frozen=True)
class NodeStarted:
    node_id: str
    node_type: str


@dataclass(frozen=True)
class NodeProgress:
    node_id: str
    step: int  # 1-based: step `step` of `total` has finished
    total: int
    rate: float  # steps per second over the node so far
    kind: str = "step"  # "sampler_step", "decode_token", ...


@dataclass(frozen=True)
class NodePreview:
    """A cheap picture of work in progress (latent preview) or a final image from a preview node."""

    node_id: str
    image: Any  # PIL.Image.Image
    final: bool = False


@dataclass(frozen=True)
class NodeText:
    """Text streaming out of a node (LLM tokens); `delta` is what is new since the last event."""

    node_id: str
    delta: str
    final: bool = False


@dataclass(frozen=True)
class NodeLog:
    node_id: str
    message: str


@dataclass(frozen=True)
class NodeCached:
    node_id: str
    node_type: str


@dataclass(frozen=True)
class NodeFinished:
    node_id: str
    node_type: str
    seconds: float
    files: tuple[str, ...] = ()
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeFailed:
    node_id: str
    node_type: str
    error_type: str
    message: str
    seconds: float


@dataclass(frozen=True)
class RunFinished:
    run_index: int
    ok: bool
    cancelled: bool
    seconds: float
    error: str | None = None


RunEvent = (
    RunStarted
    | NodeStarted
    | NodeProgress
    | NodePreview
    | NodeText
    | NodeLog
    | NodeCached
    | NodeFinished
    | NodeFailed
    | RunFinished
)
