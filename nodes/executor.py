"""The executor: runs what the requested outputs need, in topological order, with a cache.

Lives here: `Executor`, `RunResult`, `NodeResult`, `NodeRunError`, `model_keys`. Imports `memory`, `nodes.*`;
how a failure reads and which models a node hands on are in `nodes.failures`.

Each node's cache key (its signature) hashes its type, version and parameters together with the
signatures of the nodes feeding it, so after an edit only that node and its descendants re-run
(ComfyUI's input-signature cache, without its globals). The executor keeps one cached entry per
node id, so memory held by the cache is bounded by the graph. A failing node stops the run with the
error attached to it; a device out-of-memory gets one retry under a stricter offload policy.

Before each node the executor tells the memory manager which models the next node to run will use
(`node_scope(..., next_users=...)`), so a policy that unloads after use keeps a model across two
consecutive nodes that share it (the positive and negative prompts' text encoder) and unloads the rest.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memory import BudgetExceeded, MemoryManager, ModelHandle
from nodes.context import Cancelled, CancelToken, NodeContext, loads_reported_to
from nodes.events import (
    NodeCached,
    NodeFailed,
    NodeFinished,
    NodeStarted,
    RunEvent,
    RunFinished,
    RunStarted,
    failure_text,
)
from nodes.failures import exception_message, wired_models, with_field
from nodes.registry import NodeRegistry
from nodes.spec import NodeSpec
from nodes.workflow import Workflow, WorkflowError, validate

log = logging.getLogger(__name__)


def _file_stamp(value: Any) -> list[int] | None:
    """Size and modification time of a file parameter's target, or None when it names no local file."""
    if not isinstance(value, str) or not value or ":" in value.split("/")[0]:
        return None  # empty, or a scheme such as builtin:/demo:
    try:
        st = os.stat(os.path.expanduser(value))
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def model_keys(value: Any) -> set[str]:
    """Keys of the models a wire value refers to: a `ModelHandle`, or a value with `.handle` / `.handles`
    (the model references pipelines put on wires: DenoiserRef, TextEncoderRef, VaeRef, LLMModel)."""
    if isinstance(value, ModelHandle):
        return {value.key}
    keys = set()
    single = getattr(value, "handle", None)
    if isinstance(single, ModelHandle):
        keys.add(single.key)
    for h in getattr(value, "handles", None) or ():
        if isinstance(h, ModelHandle):
            keys.add(h.key)
    return keys


class NodeRunError(Exception):
    """What a node raised, with the node it happened in."""

    def __init__(self, node_id: str, node_type: str, error_type: str, message: str) -> None:
        self.node_id, self.node_type, self.error_type = node_id, node_type, error_type
        super().__init__(failure_text(node_id, node_type, message))


@dataclass
class NodeResult:
    status: str  # "ran" | "cached" | "error" | "cancelled" | "pending"
    node_type: str
    seconds: float = 0.0
    files: list[str] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    error: dict[str, str] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": self.node_type,
            "status": self.status,
            "seconds": round(self.seconds, 4),
            "outputs": list(self.files),
        }
        if self.metrics:
            out["metrics"] = dict(self.metrics)
        if self.error is not None:
            out["error"] = dict(self.error)
        return out


@dataclass
class RunResult:
    run_index: int
    ok: bool = False
    cancelled: bool = False
    seconds: float = 0.0
    nodes: dict[str, NodeResult] = field(default_factory=dict)
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    error: str | None = None
    failed_node: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.run_index,
            "ok": self.ok,
            "cancelled": self.cancelled,
            "seconds": round(self.seconds, 4),
            "error": self.error,
            "failed_node": self.failed_node,
            "nodes": {nid: r.to_json() for nid, r in self.nodes.items()},
        }


class Executor:
    """Runs workflows against one registry and one memory manager (built by the caller, who closes it)."""

    def __init__(self, registry: NodeRegistry, memory: MemoryManager, *, allow_pickle: bool = False) -> None:
        if memory is None:
            raise TypeError("Executor needs the app's MemoryManager (it never builds its own)")
        self.registry = registry
        self.memory = memory
        self.allow_pickle = allow_pickle
        # node id -> (signature, outputs, files, metrics): one entry per node, replaced when its
        # signature changes and dropped when the node leaves the graph.
        self._cache: dict[str, tuple[str, dict[str, Any], list[str], dict[str, float]]] = {}
        self._runs = 0

    # -- planning ---------------------------------------------------------------------------------

    def sinks(self, wf: Workflow) -> list[str]:
        return [
            nid for nid, node in wf.nodes.items() if (spec := self.registry.get(node.type)) and spec.is_output
        ]

    def plan(self, wf: Workflow, targets: Iterable[str] | None = None) -> list[str]:
        """The nodes the targets need (default: every output node), upstream first."""
        wanted = list(targets) if targets is not None else self.sinks(wf)
        if targets is None and not wanted:
            wanted = list(wf.nodes)  # a graph with no sink: run it all rather than nothing
        order: list[str] = []
        state: dict[str, int] = {}  # 1 visiting, 2 done

        def visit(nid: str) -> None:
            if state.get(nid) == 2:
                return
            if state.get(nid) == 1:
                raise ValueError(f"cycle through node {nid!r}")
            state[nid] = 1
            # Sorted for a stable order across runs and machines.
            for port in sorted(wf.nodes[nid].inputs):
                visit(wf.nodes[nid].inputs[port].node)
            state[nid] = 2
            order.append(nid)

        for nid in wanted:
            if nid not in wf.nodes:
                raise KeyError(f"no node {nid!r} in the workflow")
            visit(nid)
        return order

    def signatures(self, wf: Workflow, order: list[str], out_dir: Path | None = None) -> dict[str, str]:
        sigs: dict[str, str] = {}
        out_sigs: dict[tuple[str, str], str] = {}  # (node, output) -> signature, for narrowed outputs

        def link_sig(link: Any) -> list[str]:
            return [out_sigs.get((link.node, link.output), sigs[link.node]), link.output]

        for nid in order:
            node = wf.nodes[nid]
            spec = self.registry[node.type]
            params = {k: v for k, v in sorted(node.params.items()) if k not in node.inputs}
            key = {
                "type": node.type,
                "version": spec.version,
                "params": params,
                "inputs": {port: link_sig(link) for port, link in sorted(node.inputs.items())},
                # A file edited on disk under the same name is new input.
                "files": {
                    p.name: _file_stamp(params[p.name])
                    for p in spec.params
                    if p.kind == "path" and p.name in params
                },
            }
            if spec.is_output and out_dir is not None:
                key["out_dir"] = str(out_dir.resolve())  # writing somewhere else is new work
            blob = json.dumps(key, sort_keys=True, default=repr).encode()
            sigs[nid] = hashlib.sha256(blob).hexdigest()
            for out in spec.outputs:
                if out.depends_on is not None:
                    narrow = {
                        **key,
                        "output": out.name,
                        "params": {k: v for k, v in params.items() if k in out.depends_on},
                        "inputs": {k: v for k, v in key["inputs"].items() if k in out.depends_on},
                    }
                    blob = json.dumps(narrow, sort_keys=True, default=repr).encode()
                    out_sigs[(nid, out.name)] = hashlib.sha256(blob).hexdigest()
        return sigs

    def prune_cache(self, wf: Workflow) -> None:
        """Forget nodes that left the graph, so their tensors and model handles can be freed."""
        for nid in [nid for nid in self._cache if nid not in wf.nodes]:
            del self._cache[nid]

    def clear_cache(self) -> None:
        self._cache.clear()

    def cached_node_ids(self, wf: Workflow) -> set[str]:
        """Nodes whose cached outputs are still valid for this workflow (the editor shows them as cached)."""
        order = self.plan(wf, targets=list(wf.nodes))
        sigs = self.signatures(wf, order)
        return {nid for nid in order if nid in self._cache and self._cache[nid][0] == sigs[nid]}

    # -- running ----------------------------------------------------------------------------------

    def run(
        self,
        wf: Workflow,
        *,
        targets: Iterable[str] | None = None,
        out_dir: Path | str = "outputs",
        on_event: Callable[[RunEvent], None] | None = None,
        cancel: CancelToken | None = None,
        workflow_json: dict[str, Any] | None = None,
    ) -> RunResult:
        """Run the workflow once. Never raises for a node's failure: the result carries it.

        `workflow_json` is the graph saved into output files (PNG metadata): the user's graph, with its
        reroutes, bypassed and skipped nodes, when `wf` is the rewritten one that runs; default `wf` itself."""
        problems = validate(wf, self.registry)
        if problems:
            raise WorkflowError(problems)
        emit = on_event or (lambda event: None)
        cancel = cancel or CancelToken()
        out_dir = Path(out_dir)
        run_index = self._runs
        self._runs += 1
        result = RunResult(run_index)
        self.prune_cache(wf)
        self.memory.begin_run()
        order = self.plan(wf, targets)
        sigs = self.signatures(wf, order, out_dir)
        workflow_json = workflow_json if workflow_json is not None else wf.to_dict()
        values: dict[str, dict[str, Any]] = {}
        for nid in order:
            result.nodes[nid] = NodeResult("pending", wf.nodes[nid].type)
        started = time.perf_counter()
        emit(RunStarted(run_index, tuple(order)))
        # The nodes that will really run (cache misses), in order: the "next user" hints follow them.
        to_run = [nid for nid in order if nid not in self._cache or self._cache[nid][0] != sigs[nid]]
        try:
            for nid in order:
                if cancel.cancelled:
                    raise Cancelled("cancelled before node " + repr(nid))
                node = wf.nodes[nid]
                spec = self.registry[node.type]
                cached = self._cache.get(nid)
                if cached is not None and cached[0] == sigs[nid]:
                    values[nid] = cached[1]
                    record = result.nodes[nid]
                    record.status, record.files, record.metrics = "cached", list(cached[2]), dict(cached[3])
                    emit(NodeCached(nid, node.type))
                    continue
                kwargs = dict(node.params)
                for port, link in node.inputs.items():
                    kwargs[port] = values[link.node][link.output]
                    self._check_wired_param(nid, spec, port, kwargs[port], result, emit)
                for inp in spec.inputs:
                    kwargs.setdefault(inp.name, None)  # optional inputs left unconnected
                nxt = to_run.index(nid) + 1 if nid in to_run else len(to_run)
                next_users = self._models_of(wf, to_run[nxt], values) if nxt < len(to_run) else set()
                outputs = self._run_node(
                    nid, spec, kwargs, result, emit, cancel, out_dir, workflow_json, next_users
                )
                values[nid] = outputs
                record = result.nodes[nid]
                self._cache[nid] = (sigs[nid], outputs, list(record.files), dict(record.metrics))
                self._check_budget(wf, nid, spec, to_run[to_run.index(nid) + 1 :], outputs, result, emit)
            result.ok = True
        except Cancelled:
            result.cancelled = True
            result.error = "cancelled"
            for r in result.nodes.values():
                if r.status == "pending":
                    r.status = "cancelled"
        except NodeRunError as exc:
            result.error = str(exc)
            result.failed_node = exc.node_id
        result.seconds = time.perf_counter() - started
        result.outputs = values
        emit(RunFinished(run_index, result.ok, result.cancelled, result.seconds, result.error))
        return result

    @staticmethod
    def _models_of(wf: Workflow, nid: str, values: dict[str, dict[str, Any]]) -> set[str]:
        """Models the node `nid` will get on its wires, as far as they exist already (a wire from a node
        that hasn't run yet carries a model that isn't loaded yet, so there is nothing to keep for it)."""
        keys: set[str] = set()
        for link in wf.nodes[nid].inputs.values():
            if link.node in values:
                keys |= model_keys(values[link.node].get(link.output))
        return keys

    def _check_budget(
        self,
        wf: Workflow,
        nid: str,
        spec: NodeSpec,
        remaining: list[str],
        outputs: dict[str, Any],
        result: RunResult,
        emit: Callable[[RunEvent], None],
    ) -> None:
        """After a node hands out models: each one the rest of the run uses must be able to fit at all.

        Loader nodes only register models (their bytes from headers and configs); loads happen in the nodes
        using them. So a budget too small for a model is refused here, on the node that chose it, before the
        model is ever loaded rather than after the work before its first use.
        """
        keys = wired_models(wf, nid, remaining, outputs, model_keys)
        problem = self.memory.budget_problem(keys) if keys else None
        if problem is None:
            return
        self._cache.pop(nid, None)  # a cached loader would skip this check on the next run
        record = result.nodes[nid]
        record.status, record.error = "error", {"type": "BudgetExceeded", "message": problem}
        emit(NodeFailed(nid, spec.type, "BudgetExceeded", problem, record.seconds))
        raise NodeRunError(nid, spec.type, "BudgetExceeded", problem)

    def _check_wired_param(
        self,
        nid: str,
        spec: NodeSpec,
        port: str,
        value: Any,
        result: RunResult,
        emit: Callable[[RunEvent], None],
    ) -> None:
        """A parameter fed by a wire gets the same range and choice checks as one typed in the widget."""
        param = spec.param(port)
        if param is None:
            return
        reason = param.check(value)
        if reason is None:
            return
        message = f"field {port!r} (fed by a wire): {reason}"
        record = result.nodes[nid]
        record.status, record.error = "error", {"type": "ValueError", "message": message}
        emit(NodeStarted(nid, spec.type))
        emit(NodeFailed(nid, spec.type, "ValueError", message, 0.0))
        raise NodeRunError(nid, spec.type, "ValueError", message)

    def _run_node(
        self,
        nid: str,
        spec: NodeSpec,
        kwargs: dict[str, Any],
        result: RunResult,
        emit: Callable[[RunEvent], None],
        cancel: CancelToken,
        out_dir: Path,
        workflow_json: dict[str, Any],
        next_users: set[str],
    ) -> dict[str, Any]:
        record = result.nodes[nid]
        emit(NodeStarted(nid, spec.type))
        started = time.perf_counter()
        retried = False
        while True:
            ctx = NodeContext(
                node_id=nid,
                node_type=spec.type,
                memory=self.memory,
                out_dir=out_dir,
                workflow_json=workflow_json,
                emit=emit,
                cancel=cancel,
                allow_pickle=self.allow_pickle,
            )
            try:
                with (
                    loads_reported_to(self.memory, ctx),
                    self.memory.node_scope(nid, spec.type, next_users=next_users),
                ):
                    outputs = spec.run(ctx, **kwargs)
                break
            except Cancelled:
                record.status = "cancelled"
                record.seconds = time.perf_counter() - started
                raise
            except Exception as exc:  # a node may raise anything; it is reported, never swallowed
                if not retried and self.memory.is_oom(exc) and self.memory.recover_from_oom(exc):
                    retried = True
                    log.warning(
                        "node %s ran out of memory; retrying under policy %r", nid, self.memory.policy
                    )
                    continue
                message = with_field(spec, kwargs, exception_message(exc))
                if self.memory.is_oom(exc) and not isinstance(exc, BudgetExceeded):
                    # BudgetExceeded already ends with the ledger; anything else gets it once here.
                    message += "\n\nWhat was where:\n" + self.memory.ledger_text()
                record.status = "error"
                record.seconds = time.perf_counter() - started
                record.error = {
                    "type": type(exc).__name__,
                    "message": message,
                    "traceback": traceback.format_exc(),
                }
                emit(NodeFailed(nid, spec.type, type(exc).__name__, message, record.seconds))
                raise NodeRunError(nid, spec.type, type(exc).__name__, message) from exc
        missing = [o.name for o in spec.outputs if o.name not in (outputs or {})]
        if missing:
            message = f"{spec.type}.run returned no value for output(s) {missing}"
            record.status, record.error = "error", {"type": "NodeContractError", "message": message}
            emit(NodeFailed(nid, spec.type, "NodeContractError", message, time.perf_counter() - started))
            raise NodeRunError(nid, spec.type, "NodeContractError", message)
        record.status = "ran"
        record.seconds = time.perf_counter() - started
        record.files = list(ctx.files)
        record.metrics = dict(ctx.metrics)
        emit(NodeFinished(nid, spec.type, record.seconds, tuple(ctx.files), dict(ctx.metrics)))
        return outputs
