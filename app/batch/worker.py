"""A sweep worker: one executor and one memory manager that run jobs one after another.

Lives here: `WorkerConfig`, `JobResult`, `SweepWorker`, `missing_files`. Imports `nodes`, `memory`,
`pipelines.paths`. No Qt and no Ray: the local runner uses a `SweepWorker` directly, and the Ray backend
wraps this same class as an actor (one per GPU), so a job runs the same code everywhere.

The executor and the memory manager live as long as the worker, so a model loaded for one job is still
loaded (and its loader node cached) for the next job that uses it.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from memory import LoadEvent, MemoryConfig, MemoryManager
from nodes.context import CancelToken
from nodes.events import RunEvent
from nodes.executor import Executor, RunResult
from nodes.registry import NodeRegistry, default_registry
from nodes.sweep import SweepJob, apply_job
from nodes.workflow import Workflow, WorkflowError
from pipelines.paths import ModelNotFoundError, resolve_model_path

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp")


@dataclass(frozen=True)
class WorkerConfig:
    """A worker's own settings; its memory manager's are the one `MemoryConfig` (`memory`), passed as is."""

    worker_id: str = "local"
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    threads: int | None = None  # torch threads in this worker (None: torch's choice)
    allow_pickle: bool = False
    # None: write into a private temp folder and send the files back with the result (a remote worker);
    # a folder: write there directly (the local runner).
    out_dir: str | None = None


@dataclass
class JobResult:
    """One job's row in the sweep report; `files` carries a remote worker's outputs back to the caller."""

    index: int
    values: dict[str, Any]
    status: str  # "ok" | "failed" | "cancelled" | "skipped"
    worker: str = ""
    seconds: float = 0.0
    outputs: list[str] = field(default_factory=list)
    images: int = 0
    tokens: int = 0
    error: str | None = None
    failed_node: str | None = None
    files: dict[str, bytes] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        del out["files"]
        out["seconds"] = round(self.seconds, 4)
        return out


def missing_files(wf: Workflow, registry: NodeRegistry) -> list[str]:
    """`node.param = path` for every file parameter naming something not on this machine."""
    missing = []
    for nid, node in wf.nodes.items():
        spec = registry.get(node.type)
        for param in spec.params if spec else ():
            value = node.params.get(param.name)
            if param.kind != "path" or not isinstance(value, str) or not value or param.name in node.inputs:
                continue
            if value.startswith("demo:"):
                continue  # built offline on first use, on whichever machine runs it
            try:
                found = resolve_model_path(value).exists()
            except (ModelNotFoundError, ValueError):
                found = False
            if not found:
                missing.append(f"{nid}.{param.name} = {value}")
    return missing


def _job_outputs_named(wf: Workflow, registry: NodeRegistry, job: SweepJob) -> None:
    """Give every file a job writes its job's name: `txt2img` -> `txt2img-j003-seed-44`."""
    for node in wf.nodes.values():
        spec = registry.get(node.type)
        if spec is None or spec.param("prefix") is None or "prefix" in node.inputs:
            continue
        node.params["prefix"] = f"{node.params.get('prefix') or node.type.lower()}-{job.slug}"


class SweepWorker:
    """Holds an executor and a memory manager; `run_job` never raises for a job's own failure."""

    def __init__(
        self,
        config: WorkerConfig,
        workflow: Workflow,
        registry: NodeRegistry | None = None,
        cancel: CancelToken | None = None,
    ) -> None:
        if config.threads is not None:
            import torch

            torch.set_num_threads(config.threads)
        self.config = config
        self.registry = registry if registry is not None else default_registry()
        self.workflow = workflow
        self.memory = MemoryManager(config.memory)
        self.executor = Executor(self.registry, self.memory, allow_pickle=config.allow_pickle)
        self.cancel_token = cancel or CancelToken()
        self._ship = config.out_dir is None
        self.out_dir = Path(config.out_dir or tempfile.mkdtemp(prefix="nodeloom-sweep-"))

    def info(self) -> dict[str, Any]:
        """Where this worker runs: host, process, device, the GPUs it was given, torch threads."""
        import torch

        return {
            "worker": self.config.worker_id,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "device": str(self.memory.device),
            "gpus": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
            "threads": torch.get_num_threads(),
        }

    def cancel(self) -> None:
        self.cancel_token.cancel()

    def run_job(self, job: SweepJob, on_event: Callable[[RunEvent], None] | None = None) -> JobResult:
        worker = self.config.worker_id
        if self.cancel_token.cancelled:
            return JobResult(job.index, job.values, "skipped", worker, error="cancelled before it started")
        wf = apply_job(self.workflow, job)
        missing = missing_files(wf, self.registry)
        if missing:
            where = f"worker {worker} on {socket.gethostname()}"
            return JobResult(
                job.index,
                job.values,
                "failed",
                worker,
                error=f"{where} has no file for: {'; '.join(missing)}",
            )
        _job_outputs_named(wf, self.registry, job)
        try:
            run = self.executor.run(wf, out_dir=self.out_dir, cancel=self.cancel_token, on_event=on_event)
        except WorkflowError as exc:  # a swept value the workflow refuses
            return JobResult(job.index, job.values, "failed", worker, error=str(exc))
        return self._result(job, run)

    def _result(self, job: SweepJob, run: RunResult) -> JobResult:
        ran = [n for n in run.nodes.values() if n.status == "ran"]
        outputs = [f for n in ran for f in n.files]
        status = "ok" if run.ok else ("cancelled" if run.cancelled else "failed")
        result = JobResult(
            job.index,
            job.values,
            status,
            self.config.worker_id,
            seconds=run.seconds,
            outputs=outputs,
            images=sum(Path(f).suffix.lower() in IMAGE_SUFFIXES for f in outputs),
            tokens=int(sum(n.metrics.get("tokens", 0.0) for n in ran)),
            error=None if run.ok else run.error,
            failed_node=run.failed_node,
        )
        if self._ship:
            # The caller may be on another machine: send the bytes back and keep nothing here.
            for name in outputs:
                path = Path(name)
                result.files[path.name] = path.read_bytes()
                path.unlink()
            result.outputs = [Path(f).name for f in outputs]
        return result

    def telemetry(self) -> dict[str, Any]:
        """This worker's memory report, with the model loads counted per component."""
        report = self.memory.report()
        counts: dict[str, int] = {}
        for event in self.memory.telemetry.events(LoadEvent):
            counts[event.component] = counts.get(event.component, 0) + 1
        return {**self.info(), "load_counts": counts, "memory": report}

    def close(self) -> None:
        self.memory.close()
        if self._ship:
            shutil.rmtree(self.out_dir, ignore_errors=True)
