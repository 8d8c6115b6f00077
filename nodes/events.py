"""Events the executor emits while it runs a workflow.

Lives here: one frozen dataclass per event and the `RunEvent` union. Imports nothing from Nodeloom.
The headless CLI prints them; the GUI turns them into queued Qt signals. They are values, not strings.
Also here: `PROGRESS_KINDS`, the one list of progress kinds, and `describe_progress`, the one wording of a
progress event that the CLI and the GUI both show ("loading unet 0.8/3.2 GiB", "converting GGUF 40%"),
and `failure_text`, the one wording of a node's failure (CLI, editor, sweep rows, report).
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
    """The run event for progress: a pipeline's `pipelines.steps.Step` (timed kinds, emitted with its memory
    `StepEvent` from one clock reading in `NodeContext.progress`), or a load, conversion or import."""

    node_id: str
    step: int  # 1-based: step `step` of `total` has finished (bytes for "load_bytes")
    total: int
    rate: float  # units (steps, tokens, bytes) per second over this task so far
    kind: str = "step"  # a name in PROGRESS_KINDS
    label: str = ""  # what the task is: a component ("unet"), a conversion stage ("reading metadata (1/4)")


@dataclass(frozen=True)
class ProgressKind:
    """How one kind of progress is counted and worded."""

    name: str
    verb: str  # "sampling", "loading", ...
    unit: str  # "it", "tok", "bytes", "%"
    timed: bool  # each call is a step whose duration the step-timings plot shows (memory.record_step)


PROGRESS_KINDS: dict[str, ProgressKind] = {
    k.name: k
    for k in (
        ProgressKind("step", "step", "it", timed=True),
        ProgressKind("sampler_step", "sampling", "it", timed=True),
        ProgressKind("decode_token", "generating", "tok", timed=True),
        # Weights read from disk into a model, counted in bytes; the total is what the ledger accounts.
        ProgressKind("load_bytes", "loading", "bytes", timed=False),
        # A one-off conversion (a GGUF to safetensors); the label names the stage, step/total count within it.
        ProgressKind("convert", "converting", "%", timed=False),
        # Importing a library the first time a session needs it (diffusers, transformers: seconds on a slow
        # machine); no fraction to show, only what is being imported.
        ProgressKind("import", "importing", "stage", timed=False),
    )
}


def progress_kind(name: str) -> ProgressKind:
    return PROGRESS_KINDS.get(name) or ProgressKind(name, name.replace("_", " "), "it", timed=True)


def _gib(nbytes: float) -> str:
    return f"{nbytes / 1024**3:.1f}"


def _size(nbytes: float) -> str:
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if nbytes >= size:
            return f"{nbytes / size:.1f} {unit}"
    return f"{nbytes:.0f} B"


def progress_amount(event: NodeProgress) -> str:
    """How far: "3/20", "0.8/3.2 GiB", "40%"."""
    unit = progress_kind(event.kind).unit
    if unit == "bytes" and event.total <= 0:  # a whole-module build whose size is known only afterwards
        return "…"
    if unit == "bytes":
        if event.total >= 1024**3 // 2:
            return f"{_gib(event.step)}/{_gib(event.total)} GiB"
        digits = 0 if event.total >= 10 * 1024**2 else 1
        return f"{event.step / 1024**2:.{digits}f}/{event.total / 1024**2:.{digits}f} MiB"
    if unit == "%":
        return f"{100 * event.step // max(event.total, 1)}%"
    if unit == "stage":
        return ""
    return f"{event.step}/{event.total}"


def progress_rate(event: NodeProgress) -> str:
    unit = progress_kind(event.kind).unit
    if unit == "bytes":
        return f"{_size(event.rate)}/s"
    if unit in ("%", "stage"):
        return ""
    return f"{event.rate:.1f} {unit}/s"


def describe_progress(event: NodeProgress) -> tuple[str, str]:
    """(short, long) wording: the short one fits a node's header, the long one a status line.

    >>> describe_progress(NodeProgress("s", 8 * 2**27, 32 * 2**27, 0.0, "load_bytes", "unet"))[0]
    'loading unet 1.0/4.0 GiB'
    """
    kind = progress_kind(event.kind)
    amount = progress_amount(event)
    if kind.unit == "stage":
        return f"{kind.verb} {event.label}", f"{kind.verb} {event.label} (once per session)"
    if kind.unit == "bytes":
        short = f"{kind.verb} {event.label} {amount}".replace("  ", " ")
    elif kind.unit == "%":  # label "GGUF: reading metadata (1/4)": the part before the colon names the thing
        short = f"{kind.verb} {event.label.split(':')[0]} {amount}".replace("  ", " ")
    else:
        short = amount
    what = f"{kind.verb} {event.label}".strip() if kind.unit != "bytes" else short
    rate = progress_rate(event)
    long = f"{what} · {amount}" if kind.unit != "bytes" else what
    return short, long + (f" · {rate}" if rate else "")


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


def failure_text(node_id: str, node_type: str, message: str) -> str:
    """A node's failure as users read it: a sentence naming the node, then what went wrong.

    The exception's class is not part of it ("UnsafeFormatError: ..." means nothing to a user); it stays in
    `NodeFailed.error_type` and the report's `error.type` for whoever debugs.
    """
    return f"node {node_id!r} ({node_type}) failed: {message}"


@dataclass(frozen=True)
class NodeFailed:
    node_id: str
    node_type: str
    error_type: str  # the exception's class, for reports and debugging; never shown as the message
    message: str  # what went wrong, naming the field where the executor knows it
    seconds: float

    @property
    def text(self) -> str:
        return failure_text(self.node_id, self.node_type, self.message)


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
