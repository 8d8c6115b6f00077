"""The graph side of a memory plan: each node's model uses and working memory, found without loading weights.

Lives here: `NodeUses`, `UseEstimate`, `walk`. Imports `memory`, `nodes.*`, and pipelines' working-memory
formulas (the same functions the pipelines call before each use).

Walking the graph in run order:
- a node that writes outputs (`is_output`) is not run: it uses no model and the plan must write nothing; the
  modules it declares (`NodeSpec.imports`: Save Video's PyAV) join the deferred imports, made before a fitting
  plan measures the baseline;
- a node that samples (a DENOISER and a LATENT input: Sampler, SamplerAdvanced) gets its working memory from
  `pipelines.diffusion.planned_working` (its family's loop formula on the latent's shape, video frames
  included, plus a step cache's residuals when `cache` is on); its output is its input latent (same shape;
  MiniMax H3's still: `plan_stand_ins.sampled_stand_in`);
- every other node runs for real with a capturing stand-in of the memory manager: loader nodes register their
  models (headers and configs, no weights) with the real manager; a loader that reserves working memory is
  about to work on weights (a GGUF LLM's first conversion to float32): it is stopped there, the reservation
  counts, and the nodes whose model comes from it are not run (a second plan, after that first run, has
  them); a node that asks to `use` a model is
  stopped right there and the use it asked for (the model, its `Working` formula and shape key, what it
  reserved before, such as a KV cache) is recorded. The stopped node's outputs are stand-ins by port type
  (a latent passed through, a blank image of the latent's size, an empty text), so the nodes after it still
  plan. Only a node's first use is seen: a second text encoder (SDXL, Flux) is counted resident, with no
  working memory of its own.
A working-memory figure is the learned peak for (device kind, node type, model, shape) when one was measured
(`memory.learned`), else the formula; the node's whole learned peak (keyed by its first use) replaces it when
larger, at the first use and beside each model the node uses after it, as the manager reserves it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memory import MemoryManager, ModelHandle, Working
from memory.learned import node_shape_key
from nodes.context import Cancelled, CancelToken, NodeContext
from nodes.executor import model_keys
from nodes.plan_stand_ins import latent_stand_in, sampled_stand_in
from nodes.registry import NodeRegistry
from nodes.spec import NodeSpec
from nodes.types import MODEL_PORT_TYPES
from nodes.workflow import Workflow

UNKNOWN = object()  # an output the plan cannot produce (a node it could not run)


class _Captured(Exception):
    """Raised inside a node at its first model use: the plan has what it needed."""


@dataclass(frozen=True)
class UseEstimate:
    key: str
    component: str
    working_bytes: int
    source: str  # "learned" | "formula" | "fixed" | "none" (no working memory declared) | "unknown"
    shape_key: str = ""
    formula_bytes: int | None = None  # the formula, beside a learned figure


@dataclass
class NodeUses:
    node_id: str
    node_type: str
    uses: list[UseEstimate] = field(default_factory=list)
    reserved: dict[str, int] = field(default_factory=dict)  # what -> bytes, reserved outside a use
    note: str = ""

    @property
    def reserved_bytes(self) -> int:
        return sum(self.reserved.values())


class _PlanContext(NodeContext):
    """A node's context in the plan: the imports a node announces (`importing`: diffusers, transformers) are
    recorded, not made, so a plan reads headers and configs without paying seconds of imports; the classes
    themselves are imported only when a model is built (`pipelines.diffusion.family_types.ClassRef`)."""

    def __init__(self, deferred: list[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._deferred = deferred

    def importing(self, *modules: str) -> None:
        import sys

        for name in modules:
            if name not in sys.modules and name not in self._deferred:
                self._deferred.append(name)


class _CapturingMemory:
    """The real manager for everything but `use` (recorded, then the node is stopped) and reservations."""

    def __init__(self, real: MemoryManager) -> None:
        self._real = real
        self.uses: list[tuple[ModelHandle, Working | None, int]] = []
        self.reserved: dict[str, int] = {}
        self.loading = False  # set for a node fed by no model: a loader, when it hands models on

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    @contextmanager
    def use(
        self, handle: ModelHandle, *, working_bytes: int = 0, working: Working | None = None
    ) -> Iterator[Any]:
        self.uses.append((handle, working, working_bytes))
        raise _Captured
        yield  # a generator, for @contextmanager  # pragma: no cover

    def reserve_working(self, nbytes: int, what: str) -> None:
        self.reserved[what] = nbytes
        if self.loading:  # a loader's reservation is for real work on weights (a GGUF conversion): stop here
            raise _Captured

    def release_working(self, what: str) -> None:
        pass  # the plan keeps what was reserved: it is this node's working memory

    def check_fits(self, what: str, extra_bytes: int, handle: ModelHandle | None = None) -> None:
        pass  # the plan decides what fits


def _estimate(
    memory: MemoryManager, node_type: str, handle: ModelHandle, working: Working | None, fixed: int
):
    if working is None:
        return UseEstimate(handle.key, handle.spec.name, fixed, "fixed" if fixed else "none")
    learned = memory.learned.get(memory.device_kind, node_type, handle.spec.learned_key, working.shape_key)
    whole = _node_figure(memory, node_type, handle, working)
    if whole is not None and whole > (learned if learned is not None else working.formula_bytes):
        learned = whole  # the manager's rule (`working_estimate`): the node's whole peak when larger
    if learned is not None:
        return UseEstimate(
            handle.key, handle.spec.name, learned, "learned", working.shape_key, working.formula_bytes
        )
    return UseEstimate(handle.key, handle.spec.name, working.formula_bytes, "formula", working.shape_key)


def _node_figure(
    memory: MemoryManager, node_type: str, handle: ModelHandle, working: Working | None
) -> int | None:
    """The node's whole learned peak (`memory.learned.node_shape_key`), keyed by its first use."""
    if working is None:
        return None
    shape_key = node_shape_key(working.shape_key)
    return memory.learned.get(memory.device_kind, node_type, handle.spec.learned_key, shape_key)


def _wired_models(memory: MemoryManager, kwargs: dict[str, Any]) -> list[ModelHandle]:
    keys = sorted({k for v in kwargs.values() for k in model_keys(v)})
    return [memory.handle(k) for k in keys if k in memory.ledger.handles]


def _latent_in(kwargs: dict[str, Any]) -> Any:
    from pipelines.diffusion.values import Latents

    return next((v for v in kwargs.values() if isinstance(v, Latents)), None)


def _stand_ins(spec: NodeSpec, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Outputs of a node stopped at its first use, by port type, for the nodes after it to plan with."""
    import torch

    latent = _latent_in(kwargs)
    out: dict[str, Any] = {}
    for o in spec.outputs:
        kind = o.type.name
        if kind == "LATENT" and latent is not None:
            out[o.name] = latent
        elif kind == "IMAGE" and latent is not None:
            height, width = latent.pixel_size
            out[o.name] = torch.zeros(latent.samples.shape[0], height, width, 3)
        elif kind in ("TEXT", "STRING"):
            out[o.name] = ""
        else:
            out[o.name] = UNKNOWN
    return out


def _model_ports(spec: NodeSpec) -> bool:
    return any(p.type.name in MODEL_PORT_TYPES for p in (*spec.inputs, *spec.outputs))


def _is_sampler(spec: NodeSpec) -> bool:
    kinds = {i.name: i.type.name for i in spec.inputs}
    return kinds.get("denoiser") == "DENOISER" and kinds.get("latent") == "LATENT"


def _plan_sampler(memory: MemoryManager, node_type: str, kwargs: dict[str, Any]) -> NodeUses:
    from pipelines.diffusion.planned_working import planned_sampler_working
    from pipelines.diffusion.sizes import size_for_denoiser

    denoiser = kwargs["denoiser"]
    latent = kwargs.get("latent")
    if latent is not None and latent is not UNKNOWN:
        (height, width), batch = latent.pixel_size, int(latent.samples.shape[0])
    else:  # unwired: the denoiser's native size, as the Sampler does
        native = size_for_denoiser(denoiser).native
        height, width, batch, latent = native, native, 1, None
    working = planned_sampler_working(denoiser, latent, height, width, batch, kwargs)
    uses = NodeUses("", node_type, [_estimate(memory, node_type, denoiser.handle, working, 0)])
    for h in _wired_models(memory, kwargs):  # ControlNets held beside the denoiser
        if h.key != denoiser.handle.key:
            uses.uses.append(UseEstimate(h.key, h.spec.name, 0, "none"))
    return uses


def walk(
    wf: Workflow,
    registry: NodeRegistry,
    memory: MemoryManager,
    order: list[str],
    out_dir: Path,
    cancel: CancelToken,
    deferred: list[str] | None = None,
) -> list[NodeUses]:
    """Each node of `order` with the model uses it will make (see the module docstring). `deferred`
    collects the modules the nodes announced and the plan did not import (`_PlanContext`)."""
    deferred = deferred if deferred is not None else []
    values: dict[str, dict[str, Any]] = {}
    found: list[NodeUses] = []
    for nid in order:
        if cancel.cancelled:
            raise Cancelled(f"cancelled while planning, before node {nid!r}")
        node = wf.nodes[nid]
        spec = registry[node.type]
        kwargs = dict(node.params)
        for port, link in node.inputs.items():
            kwargs[port] = values.get(link.node, {}).get(link.output, UNKNOWN)
        for inp in spec.inputs:
            kwargs.setdefault(inp.name, None)
        if spec.is_output:
            found.append(NodeUses(nid, node.type, note="writes outputs: not run by the plan"))
            values[nid] = {}
            # Its writer library (PyAV: ~15 MiB of RSS) is in the run's baseline: imported before it is measured.
            deferred.extend(m for m in spec.imports if m not in sys.modules and m not in deferred)
            continue
        if node.type in registry.pack_types and not _model_ports(spec):
            # A node pack's node that touches no model: running it could take as long as the run itself
            # (a planned run would wait twice), and it uses no memory the plan counts.
            found.append(
                NodeUses(nid, node.type, note="a node pack's node with no model: not run by the plan")
            )
            values[nid] = _stand_ins(spec, kwargs)
            continue
        if _is_sampler(spec) and kwargs.get("denoiser") not in (None, UNKNOWN):
            try:
                uses = _plan_sampler(memory, node.type, kwargs)
            except (ValueError, TypeError, KeyError) as exc:  # fields the run itself will refuse
                uses = NodeUses(nid, node.type, note=f"not simulated ({type(exc).__name__}: {exc})")
                uses.uses = [
                    UseEstimate(h.key, h.spec.name, 0, "unknown") for h in _wired_models(memory, kwargs)
                ]
            uses.node_id = nid
            found.append(uses)
            latent = kwargs.get("latent")
            if latent is not None and latent is not UNKNOWN:
                kwargs["latent"] = sampled_stand_in(kwargs["denoiser"], latent)
            values[nid] = _stand_ins(spec, kwargs)
            continue
        if _model_unknown(spec, kwargs) and not _wired_models(memory, kwargs):
            # Its model comes from a node the plan stopped: running it could only fail, after whatever it
            # imports first (LLM Generate: the LLM runtime and transformers, ~1 s of a "no").
            found.append(NodeUses(nid, node.type, note=_unknown_note(kwargs)))
            values[nid] = _stand_ins(spec, kwargs)
            continue
        found.append(_run_captured(nid, node.type, spec, kwargs, memory, out_dir, values, cancel, deferred))
    return found


def _model_unknown(spec: NodeSpec, kwargs: dict[str, Any]) -> bool:
    return any(p.type.name in MODEL_PORT_TYPES and kwargs.get(p.name) is UNKNOWN for p in spec.inputs)


def _unknown_note(kwargs: dict[str, Any]) -> str:
    missing = sorted({p for p, v in kwargs.items() if v is UNKNOWN})
    return f"not simulated: its input(s) {', '.join(missing)} come from a node the plan could not run"


def _run_captured(
    nid: str,
    node_type: str,
    spec: NodeSpec,
    kwargs: dict[str, Any],
    memory: MemoryManager,
    out_dir: Path,
    values: dict[str, dict[str, Any]],
    cancel: CancelToken,
    deferred: list[str],
) -> NodeUses:
    capture = _CapturingMemory(memory)
    capture.loading = not _wired_models(memory, kwargs)
    missing = sorted({p for p, v in kwargs.items() if v is UNKNOWN})
    ctx = _PlanContext(
        deferred,
        node_id=nid,
        node_type=node_type,
        memory=capture,  # type: ignore[arg-type]
        out_dir=out_dir,
        workflow_json={},
        emit=lambda event: None,
        cancel=cancel,
    )
    uses = NodeUses(nid, node_type)
    try:
        values[nid] = spec.run(ctx, **kwargs) or {}
    except Cancelled:
        raise
    except _Captured:
        values[nid] = latent_stand_in(node_type, kwargs) or _stand_ins(spec, kwargs)
        if capture.loading and not capture.uses:
            uses.note = "stopped before " + ", ".join(capture.reserved) + " (done by the run, not the plan)"
    except Exception as exc:  # a node fed a stand-in may refuse it: its models still count as used
        values[nid] = _stand_ins(spec, kwargs)
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        uses.note = _unknown_note(kwargs) if missing else f"not simulated ({type(exc).__name__}: {why})"
        uses.uses = [UseEstimate(h.key, h.spec.name, 0, "unknown") for h in _wired_models(memory, kwargs)]
        return uses
    uses.uses = [_estimate(memory, node_type, h, w, fixed) for h, w, fixed in capture.uses]
    uses.reserved = dict(capture.reserved)
    seen = {u.key for u in uses.uses}
    # Models on its wires it would use after the first: with the node's whole learned peak beside each, as
    # the manager reserves it at every use of the node (none known: no working memory counted).
    first, first_working = capture.uses[0][:2] if capture.uses else (None, None)
    whole = _node_figure(memory, node_type, first, first_working) if first is not None else None
    for h in _wired_models(memory, kwargs):
        if h.key not in seen and capture.uses:
            later = UseEstimate(h.key, h.spec.name, 0, "none")
            if whole is not None and first_working is not None:
                shape = node_shape_key(first_working.shape_key)
                later = UseEstimate(h.key, h.spec.name, whole, "learned", shape)
            uses.uses.append(later)
    return uses
