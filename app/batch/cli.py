"""`app --run WF --sweep NODE.PARAM=SPEC ... [--zip] [--cluster ray|ray://HOST:PORT|auto]`.

Lives here: `run_sweep`, `prepare_sweep`, `SweepPlan`, `write_outputs`. Imports `app.cli` (overrides, exit
codes), `app.batch.*`, `nodes`, rich. No Qt; Ray only through `app.batch.cluster`, imported when asked for.

Prints a line per job as it ends, a progress bar, and the summary (throughput per worker and in total);
writes the report (`--report`, default OUT/sweep.json) and the contact sheet (OUT/sweep.html, .png).
Ctrl+C cancels the rest and keeps what finished (exit 130); a failed job is reported and the sweep goes on
(exit 1 at the end); a bad flag exits 2 before anything runs.
"""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from app.batch.contact_sheet import write_contact_sheet
from app.batch.local import run_local
from app.batch.report import SweepOutcome, build_report, summary_lines
from app.batch.worker import JobResult, WorkerConfig
from app.cli import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_OK, apply_overrides, parse_set
from nodes.context import CancelToken
from nodes.png import check_prefix
from nodes.registry import NodeRegistry
from nodes.sweep import SweepAxis, SweepError, SweepJob, load_key, parse_axis, plan_jobs
from nodes.workflow import Workflow, WorkflowError, atomic_write_text, load_workflow, validate


@dataclass
class SweepPlan:
    workflow: Workflow
    axes: list[SweepAxis]
    jobs: list[SweepJob]
    keys: dict[int, str]  # job index -> load key
    zip_axes: bool


def prepare_sweep(
    wf: Workflow, items: list[str], registry: NodeRegistry, *, zip_axes: bool = False
) -> SweepPlan:
    """Parse the --sweep flags against the workflow and plan the jobs; raises `SweepError`."""
    axes = [parse_axis(item, wf, registry) for item in items]
    if zip_axes and not axes:
        raise SweepError("--zip pairs --sweep flags; give at least one --sweep")
    jobs = plan_jobs(axes, zip_axes=zip_axes) or [SweepJob(0, {})]
    return SweepPlan(wf, axes, jobs, {j.index: load_key(wf, registry, j) for j in jobs}, zip_axes)


def _unique(path: Path) -> Path:
    n = 1
    candidate = path
    while candidate.exists():
        candidate = path.with_name(f"{path.stem}-{n}{path.suffix}")
        n += 1
    return candidate


def write_outputs(result: JobResult, out_dir: Path) -> None:
    """Write the files a remote worker sent back into `out_dir` (names only: never a path out of it)."""
    if not result.files:
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data in result.files.items():
        base = Path(name).name
        check_prefix(base)
        path = _unique(out_dir / base)
        path.write_bytes(data)
        written.append(str(path))
    result.files = {}
    result.outputs = written


def _job_line(result: JobResult) -> str:
    label = escape(SweepJob(result.index, result.values).label or "(no swept values)")
    colour = {"ok": "green", "failed": "red"}.get(result.status, "yellow")
    line = f"job {result.index} [{colour}]{result.status}[/] {label} in {result.seconds:.2f} s"
    if result.worker:
        line += f" [dim](worker {escape(result.worker)})[/]"
    line += "".join(f"\n    -> {escape(f)}" for f in result.outputs)
    if result.error and result.status == "failed":
        line += f"\n    [red]{escape(result.error.splitlines()[0])}[/]"
    return line


def _worker_config(args: Any, out_dir: Path | None) -> WorkerConfig:
    return WorkerConfig(
        device=args.device,
        policy=args.offload,
        vram_budget=args.vram_budget,
        ram_budget=args.ram_budget,
        threads=args.threads,
        allow_pickle=args.allow_pickle,
        out_dir=None if out_dir is None else str(out_dir),
    )


def run_sweep(args: Any, registry: NodeRegistry) -> int:
    err = Console(stderr=True, emoji=False)

    def invalid(message: str) -> int:
        err.print(f"[red]error[/]: {escape(message)}", highlight=False, soft_wrap=True)
        return EXIT_INVALID

    if args.repeat != 1:
        return invalid("--repeat does not combine with --sweep/--cluster; sweep a seed instead")
    if args.workers is not None and (args.workers < 1 or not args.cluster):
        return invalid("--workers N needs --cluster and N >= 1")
    overrides, set_errors = parse_set(args.set or [])
    if set_errors:
        return invalid("\n".join(set_errors))
    try:
        wf = load_workflow(args.run, registry)
    except WorkflowError as exc:
        return invalid(str(exc))
    problems = apply_overrides(wf, overrides, registry) + validate(wf, registry)
    if problems:
        return invalid(str(WorkflowError(problems)))
    try:
        plan = prepare_sweep(wf, list(args.sweep or []), registry, zip_axes=args.zip)
    except SweepError as exc:
        return invalid(str(exc))
    out_dir = Path(args.out)
    cluster = None
    if args.cluster:
        from app.batch.cluster import ClusterError, connect

        try:
            cluster = connect(args.cluster, workers=args.workers, threads=args.threads)
        except ClusterError as exc:
            return invalid(str(exc))

    cancel = CancelToken()

    def on_sigint(signum: int, frame: Any) -> None:
        if cancel.cancelled:
            raise KeyboardInterrupt  # a second Ctrl+C: stop now
        err.print("\n[yellow]cancelling the rest of the sweep (Ctrl+C again to abort)[/]")
        cancel.cancel()

    progress = Progress(
        TextColumn("sweep"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        disable=args.quiet,
    )
    task = progress.add_task("sweep", total=len(plan.jobs))

    finished: list[JobResult] = []

    def on_result(result: JobResult) -> None:
        write_outputs(result, out_dir)
        finished.append(result)
        progress.advance(task)
        if not args.quiet or result.status == "failed":
            progress.console.print(_job_line(result), highlight=False, soft_wrap=True)

    if not args.quiet:
        where = f"on {cluster.describe()}" if cluster else "in this process"
        err.print(f"[bold]sweep[/]: {len(plan.jobs)} job(s) of {escape(str(args.run))} {escape(where)}")
    previous = signal.signal(signal.SIGINT, on_sigint)
    outcome: SweepOutcome | None = None
    try:
        with progress:
            if cluster is not None:
                outcome = cluster.run(plan, _worker_config(args, None), cancel=cancel, on_result=on_result)
            else:
                outcome = run_local(
                    wf,
                    plan.jobs,
                    plan.keys,
                    _worker_config(args, out_dir),
                    registry=registry,
                    cancel=cancel,
                    on_result=on_result,
                )
    except KeyboardInterrupt:
        # A second Ctrl+C: no worker telemetry, but the report still lists what finished.
        err.print("[yellow]aborted[/]")
        outcome = SweepOutcome(finished, cancelled=True, backend="ray" if cluster else "local")
    finally:
        signal.signal(signal.SIGINT, previous)
        if cluster is not None:
            cluster.close()
    sheet = write_contact_sheet(outcome.results, plan.axes, out_dir, title=f"{wf.source}: sweep")
    report = build_report(
        outcome, workflow=wf.source, axes=plan.axes, zip_axes=plan.zip_axes, contact_sheet=sheet
    )
    report_path = Path(args.report) if args.report else out_dir / "sweep.json"
    atomic_write_text(report_path, json.dumps(report, indent=2, default=str) + "\n")
    if not args.quiet:
        for line in summary_lines(report):
            err.print(escape(line), highlight=False, soft_wrap=True)
        err.print(
            f"[bold]report[/] {escape(str(report_path))}"
            + (f"; contact sheet {escape(sheet['html'])}" if sheet else "")
        )
    if outcome.cancelled:
        return EXIT_INTERRUPTED
    return EXIT_OK if report["ok"] else EXIT_FAILED
