"""A use's working memory: what a pipeline declares (`Working`), the figure reserved for it (formula or learned),
and what a use and a node record once measured.

Lives here: `Working`, `working_estimate`, `record_use`, `record_node_peak`. May import: stdlib, memory.learned,
memory.ledger, memory.scope, memory.telemetry. `MemoryManager.use` and `node_scope` (memory.manager) call them.
"""

from __future__ import annotations

from dataclasses import dataclass

from memory.learned import LearnedPeaks, node_shape_key
from memory.ledger import ModelHandle
from memory.scope import NodeMeasurement, NodeScope
from memory.telemetry import Telemetry, WorkingReserved


@dataclass(frozen=True)
class Working:
    """What a pipeline declares about one use's working memory: its formula and the shape it depends on.

    shape_key: everything the activations scale with ("2x77", "1x64x64"); with the node type, model and
    device kind it keys the learned peak that replaces `formula_bytes` once measured.
    """

    formula_bytes: int
    shape_key: str


def working_estimate(
    learned: LearnedPeaks, device_kind: str, scope: NodeScope | None, handle: ModelHandle, working: Working
) -> tuple[int, int | None]:
    """(bytes to reserve, learned figure or None) for `working` beside `handle` in the node `scope`.

    The node's whole learned peak (`memory.learned.node_shape_key`) counts when it is larger: it holds
    what this use's window misses (the node's other uses and the work between them)."""
    node_type = scope.node_type if scope is not None else ""
    figure = learned.get(device_kind, node_type, handle.spec.learned_key, working.shape_key)
    if scope is not None:
        model_key, shape_key = scope.first_use or (handle.spec.learned_key, working.shape_key)
        whole = learned.get(device_kind, node_type, model_key, node_shape_key(shape_key))
        if whole is not None and whole > (figure if figure is not None else working.formula_bytes):
            figure = whole
    return (figure if figure is not None else working.formula_bytes), figure


def record_use(
    telemetry: Telemetry,
    learned: LearnedPeaks,
    device_kind: str,
    scope: NodeScope | None,
    handle: ModelHandle,
    working: Working,
    reserved: int,
    figure: int | None,
    measured: int,
    ok: bool,
) -> None:
    """Report a use's reservation (`WorkingReserved`) and, when the use succeeded, learn what it measured."""
    node_id, node_type = (scope.node_id, scope.node_type) if scope is not None else ("", "")
    telemetry.emit(
        WorkingReserved(
            node_id,
            node_type,
            handle.spec.name,
            working.shape_key,
            working.formula_bytes,
            figure,
            reserved,
            "learned" if figure is not None else "formula",
            measured,
        )
    )
    if ok:
        learned.record(device_kind, node_type, handle.spec.learned_key, working.shape_key, measured)


def record_node_peak(
    learned: LearnedPeaks, device_kind: str, scope: NodeScope, measurement: NodeMeasurement, reserved: int
) -> None:
    """Learn the node's whole peak, for the next run and plan, when its first use's window missed it (it came
    in a later use or between them); else that use's own figure has it. `reserved`: what the node reserved
    outside its uses (a KV cache), planned on its own and so not part of its peak."""
    first_peak = scope.first_use_peak
    if scope.first_use is None or first_peak is None or measurement.peak <= first_peak:
        return
    model_key, shape_key = scope.first_use
    learned.record(
        device_kind,
        scope.node_type,
        model_key,
        node_shape_key(shape_key),
        max(0, measurement.working - reserved),
    )
