"""`app --run WF --sweep NODE.PARAM=SPEC ... [--zip] [--cluster ray|ray://HOST:PORT|auto]`.

Lives here: `run_sweep`. Imports `app.cli` (overrides, exit
codes), `app.batch.*`, `nodes`, rich. No Qt; Ray only through `app.batch.cluster`, imported when asked for.

Prints a line per job as it ends, a progress bar, and the summary (throughput per worker and in total);
writes the report (`--report`, default OUT/sweep.json) and the contact sheet (OUT/sweep.html, .png).
Ctrl+C cancels the rest and keeps what finished (exit 130); a failed job is reported and the sweep goes on
(exit 1 at the end); a bad flag exits 2 before anything runs.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from app.batch.execute import execute_sweep, prepare_sweep
from app.batch.report import summary_lines
from app.batch.worker import JobResult, WorkerConfig
from app.cli import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_INVALID,
    EXIT_OK,
    apply_overrides,
    memory_config,
    parse_set,
)
from app.comfy_commands import library_from
from nodes.context import CancelToken
from nodes.files import write_target_problem
from nodes.model_names import resolve_model_names
from nodes.registry import NodeRegistry
from nodes.sweep import SweepError, SweepJob
from nodes.workflow import WorkflowError, load_workflow, validate


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
        memory=memory_config(args),
        threads=args.threads,
        allow_pickle=args.allow_pickle,
        out_dir=None if out_dir is None else str(out_dir),
    )


def run_sweep(args: Any, registry: NodeRegistry) -> int:
    err = Console(stderr=True, emoji=False, soft_wrap=True)  # never hard-wrapped on a pipe

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
    problem = write_target_problem(args.report) if args.report else None
    if problem is not None:
        return invalid(f"--report {problem}")
    try:
        wf = load_workflow(args.run, registry)
    except WorkflowError as exc:
        return invalid(str(exc))
    problems = apply_overrides(wf, overrides, registry) + validate(wf, registry)
    if not problems:  # as `app --run`: library names found, names an imported file gave kept inside it
        problems = resolve_model_names(wf, library_from(getattr(args, "models_dir", None)))
    if problems:
        return invalid(str(WorkflowError(problems)))
    try:
        plan = prepare_sweep(wf, list(args.sweep or []), registry, zip_axes=args.zip)
    except SweepError as exc:
        return invalid(str(exc))
    try:
        memory_config(args)  # a malformed budget is refused here, before any worker (or Ray) starts
    except ValueError as exc:
        return invalid(str(exc))
    out_dir = Path(args.out)
    cancel = CancelToken()

    def on_sigint(signum: int, frame: Any) -> None:
        if cancel.cancelled:
            raise KeyboardInterrupt  # a second Ctrl+C: stop now
        err.print("\n[yellow]cancelling the rest of the sweep (Ctrl+C again to abort)[/]")
        cancel.cancel()

    # Installed before Ray starts (tens of seconds): a Ctrl+C then still ends cleanly, with Ray shut down.
    previous = signal.signal(signal.SIGINT, on_sigint)
    cluster = None
    if args.cluster:
        from app.batch.cluster import ClusterError, connect, shutdown_ray_if_started

        try:
            cluster = connect(args.cluster, workers=args.workers, threads=args.threads)
        except ClusterError as exc:
            signal.signal(signal.SIGINT, previous)
            return invalid(str(exc))
        except KeyboardInterrupt:  # a second Ctrl+C while Ray was starting
            cancel.cancel()
        if cancel.cancelled:
            if cluster is not None:
                cluster.close()
            else:
                shutdown_ray_if_started()
            signal.signal(signal.SIGINT, previous)
            err.print("[yellow]cancelled before any job ran[/]")
            return EXIT_INTERRUPTED

    progress = Progress(
        TextColumn("sweep"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        disable=args.quiet,
    )
    task = progress.add_task("sweep", total=len(plan.jobs))

    def on_result(result: JobResult) -> None:
        progress.advance(task)
        if not args.quiet or result.status == "failed":
            progress.console.print(_job_line(result), highlight=False, soft_wrap=True)

    if not args.quiet:
        where = f"on {cluster.describe()}" if cluster else "in this process"
        err.print(f"[bold]sweep[/]: {len(plan.jobs)} job(s) of {escape(str(args.run))} {escape(where)}")
    try:
        with progress:
            report = execute_sweep(
                plan,
                _worker_config(args, None if cluster else out_dir),
                out_dir,
                registry=registry,
                cluster=cluster,
                cancel=cancel,
                on_result=on_result,
                report_path=Path(args.report) if args.report else None,
            )
    except KeyboardInterrupt:
        err.print(
            f"[yellow]aborted[/]; report of what finished: {escape(str(args.report or out_dir / 'sweep.json'))}"
        )
        return EXIT_INTERRUPTED
    except OSError as exc:  # the report or contact sheet could not be written (a full disk): the outputs stay
        where = exc.filename or args.report or out_dir / "sweep.json"
        err.print(
            f"[red]error[/]: cannot write {escape(str(where))}: {escape(exc.strerror or str(exc))}; the jobs' "
            f"outputs under {escape(str(out_dir))} are kept",
            highlight=False,
            soft_wrap=True,
        )
        return EXIT_FAILED
    finally:
        signal.signal(signal.SIGINT, previous)
        if cluster is not None:
            cluster.close()
    if not args.quiet:
        for line in summary_lines(report):
            err.print(escape(line), highlight=False, soft_wrap=True)
        sheet = report["contact_sheet"]
        err.print(
            f"[bold]report[/] {escape(report['report'])}"
            + (f"; contact sheet {escape(sheet['html'])}" if sheet else "")
        )
    if report["cancelled"]:
        return EXIT_INTERRUPTED
    return EXIT_OK if report["ok"] else EXIT_FAILED
