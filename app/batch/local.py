"""The local backend: every job in this process, one after another, through one `SweepWorker`.

Lives here: `run_local`. Imports `app.batch.worker`, `app.batch.report`, `nodes`. No Qt, no Ray.
Jobs run in `order_jobs` order (shared models back to back); results come back in that order through
`on_result` as each job ends. Cancelling stops the job in progress at its next step and skips the rest.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from app.batch.report import SweepOutcome
from app.batch.worker import JobResult, SweepWorker, WorkerConfig
from nodes.context import CancelToken
from nodes.events import RunEvent
from nodes.registry import NodeRegistry
from nodes.sweep import SweepJob, order_jobs
from nodes.workflow import Workflow


def run_local(
    workflow: Workflow,
    jobs: Sequence[SweepJob],
    keys: dict[int, str],
    config: WorkerConfig,
    *,
    registry: NodeRegistry | None = None,
    cancel: CancelToken | None = None,
    on_result: Callable[[JobResult], None] | None = None,
    on_event: Callable[[SweepJob, RunEvent], None] | None = None,
) -> SweepOutcome:
    cancel = cancel or CancelToken()
    report = on_result or (lambda result: None)
    started = time.perf_counter()
    worker = SweepWorker(config, workflow, registry, cancel)
    startup = time.perf_counter() - started
    results: list[JobResult] = []
    try:
        started = time.perf_counter()
        for job in order_jobs(jobs, keys):
            if cancel.cancelled:
                result = JobResult(job.index, job.values, "skipped", config.worker_id, error="cancelled")
            else:
                forward = (lambda event, job=job: on_event(job, event)) if on_event else None
                result = worker.run_job(job, forward)
            results.append(result)
            report(result)
        wall = time.perf_counter() - started
        workers = [worker.telemetry()]
    finally:
        worker.close()
    return SweepOutcome(
        sorted(results, key=lambda r: r.index),
        workers,
        wall_seconds=wall,
        cancelled=cancel.cancelled,
        backend="local",
        startup_seconds=startup,
    )
