"""The Ray backend: one actor per GPU (or `--workers N` on CPU), each a `SweepWorker` that keeps its models.

Lives here: `connect`, `RayCluster`, `ClusterError`, `RAY_HINT`, `shutdown_ray_if_started`. Imports Ray (only here, only when
`--cluster` is given: it is the optional extra `nodeloom[cluster]`), `app.batch.*`, `nodes`.

`--cluster ray` starts a private Ray instance on loopback only (127.0.0.1, no dashboard, no usage stats, a
small object store) and shuts it down afterwards; `ray://HOST:PORT` and `auto` join an existing cluster and
leave it running. Jobs go to idle actors (`nodes.sweep.pick_next`: an actor keeps to the model it has
loaded); each result brings its output files back as bytes, because the actor may be on another machine.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from app.batch.report import SweepOutcome
from app.batch.worker import JobResult, SweepWorker, WorkerConfig
from nodes.context import CancelToken
from nodes.sweep import order_jobs, pick_next

RAY_HINT = "--cluster needs Ray, which is an optional extra: pip install 'nodeloom[cluster]' (ray==2.60.0)"
DEFAULT_CPU_WORKERS = 2
# Ray's own store only carries job results (a few pictures at a time): keep it small.
OBJECT_STORE_BYTES = 200_000_000
# A private instance listens on loopback only: with the first variable unset, Ray 2.60 still binds every
# interface even when told 127.0.0.1 (measured here).
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
POLL_S = 0.25


class ClusterError(Exception):
    """Ray is missing, or the cluster could not be reached; the message says what to do."""


class _Plan(Protocol):  # app.batch.cli.SweepPlan, without importing the CLI module
    workflow: Any
    jobs: list[Any]
    keys: dict[int, str]


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ClusterError(RAY_HINT) from exc
    return ray


def shutdown_ray_if_started() -> None:
    """After an interrupted `connect`: stop whatever part of Ray had started in this process."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()


def _source_root() -> str:
    """The folder holding the `app` package, for the workers of a private instance to import this code."""
    return str(Path(__file__).resolve().parents[2])


def connect(address: str, *, workers: int | None = None, threads: int | None = None) -> RayCluster:
    """Start or join a Ray cluster. An already initialised Ray (a test, a notebook) is used as it is."""
    if address not in ("ray", "auto") and not address.startswith("ray://"):
        raise ClusterError(f"--cluster {address!r}: expected ray, ray://HOST:PORT or auto")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if address == "ray":
        # Read by Ray when it is imported (ray_constants), so set before the import.
        os.environ.update(LOOPBACK_ENV)
    ray = _import_ray()
    started = time.perf_counter()
    owns = False
    if not ray.is_initialized():
        try:
            if address == "ray":
                import torch

                gpus = torch.cuda.device_count()
                path = os.pathsep.join(p for p in (_source_root(), os.environ.get("PYTHONPATH", "")) if p)
                ray.init(
                    address="local",
                    num_cpus=max(os.cpu_count() or 1, workers or 0),
                    num_gpus=gpus,
                    include_dashboard=False,
                    object_store_memory=OBJECT_STORE_BYTES,
                    _node_ip_address="127.0.0.1",
                    runtime_env={"env_vars": {"PYTHONPATH": path}},
                    log_to_driver=False,
                    logging_level="ERROR",
                )
            else:
                ray.init(address=address, log_to_driver=False, logging_level="ERROR")
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ClusterError(f"--cluster {address}: could not start or reach Ray: {exc}") from exc
        owns = True
    gpus = int(ray.cluster_resources().get("GPU", 0))
    count = gpus if gpus else (workers or DEFAULT_CPU_WORKERS)
    return RayCluster(ray, address, owns, gpus, count, threads, time.perf_counter() - started)


@dataclass
class RayCluster:
    ray: Any
    address: str
    owns: bool  # we started or joined it, so we shut our side down at the end
    gpus: int
    workers: int
    threads: int | None
    startup_seconds: float

    def describe(self) -> str:
        per = "one per GPU" if self.gpus else "CPU"
        return f"Ray ({self.address}): {self.workers} worker(s), {per}"

    def _start_actors(self, plan: _Plan, config: WorkerConfig) -> list[Any]:
        # A threaded actor (2 slots), so `cancel` reaches a worker while it is inside a job.
        remote = self.ray.remote(SweepWorker)
        options: dict[str, Any] = {"max_concurrency": 2}
        options.update({"num_gpus": 1, "num_cpus": 0} if self.gpus else {"num_cpus": 1})
        # One torch thread per CPU worker unless told otherwise: the workers share the cores.
        threads = config.threads if config.threads is not None else (None if self.gpus else 1)
        return [
            remote.options(**options).remote(
                dataclasses.replace(config, worker_id=f"ray-{i}", threads=threads, out_dir=None),
                plan.workflow,
            )
            for i in range(self.workers)
        ]

    def run(
        self,
        plan: _Plan,
        config: WorkerConfig,
        *,
        cancel: CancelToken | None = None,
        on_result: Any = None,
    ) -> SweepOutcome:
        ray = self.ray
        cancel = cancel or CancelToken()
        report = on_result or (lambda result: None)
        t0 = time.perf_counter()
        actors = self._start_actors(plan, config)
        try:
            ray.get([a.info.remote() for a in actors])  # wait until every worker has its imports done
            startup = self.startup_seconds + time.perf_counter() - t0
            started = time.perf_counter()
            results = self._dispatch(plan, actors, cancel, report)
            wall = time.perf_counter() - started
            telemetry = self._collect(actors)
        finally:
            self._stop(actors)
        return SweepOutcome(
            sorted(results, key=lambda r: r.index),
            telemetry,
            wall_seconds=wall,
            cancelled=cancel.cancelled,
            backend="ray",
            cluster=self.address,
            startup_seconds=startup,
        )

    def _dispatch(self, plan: _Plan, actors: list[Any], cancel: CancelToken, report: Any) -> list[JobResult]:
        ray = self.ray
        pending = order_jobs(plan.jobs, plan.keys)
        idle = list(range(len(actors)))
        last_key: dict[int, str] = {}
        in_flight: dict[Any, tuple[int, Any]] = {}  # object ref -> (actor index, job)
        results: list[JobResult] = []
        told_cancel = False
        while pending or in_flight:
            if cancel.cancelled:
                if not told_cancel:
                    for actor in actors:
                        actor.cancel.remote()
                    told_cancel = True
                for job in pending:
                    results.append(JobResult(job.index, job.values, "skipped", error="cancelled"))
                    report(results[-1])
                pending = []
            while idle and pending:
                i = idle.pop(0)
                busy = [plan.keys[job.index] for _, job in in_flight.values()]
                job = pending.pop(pick_next(pending, plan.keys, last_key.get(i), busy))
                last_key[i] = plan.keys[job.index]
                in_flight[actors[i].run_job.remote(job)] = (i, job)
            if not in_flight:
                break
            ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=POLL_S)
            for ref in ready:
                i, job = in_flight.pop(ref)
                try:
                    result = ray.get(ref)
                    idle.append(i)
                except ray.exceptions.RayError as exc:  # the worker died (out of memory, node lost)
                    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                    result = JobResult(
                        job.index, job.values, "failed", f"ray-{i}", error=f"worker lost: {first}"
                    )
                results.append(result)
                report(result)
            if not idle and not in_flight and pending:  # every worker is gone
                for job in pending:
                    results.append(JobResult(job.index, job.values, "failed", error="no Ray workers left"))
                    report(results[-1])
                pending = []
        return results

    def _collect(self, actors: list[Any]) -> list[dict[str, Any]]:
        telemetry = []
        for actor in actors:
            try:
                telemetry.append(self.ray.get(actor.telemetry.remote(), timeout=60))
            except self.ray.exceptions.RayError:
                continue  # a lost worker has no telemetry; its jobs say so
        return telemetry

    def _stop(self, actors: list[Any]) -> None:
        try:
            self.ray.get([a.close.remote() for a in actors], timeout=30)
        except self.ray.exceptions.RayError:
            pass  # lost workers have nothing left to close
        for actor in actors:
            self.ray.kill(actor)

    def close(self) -> None:
        if self.owns and self.ray.is_initialized():
            self.ray.shutdown()
