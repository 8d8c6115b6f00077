"""Headless runs: `app --run WORKFLOW.json`, with rich progress, `--set` overrides and a JSON report.

Lives here: `run_headless`, `memory_config`, `parse_set`, `apply_overrides`, `HeadlessPrinter`. Imports `nodes`, `memory`,
rich. No Qt: the GUI is never imported on this path.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from app.comfy_commands import library_from, load_run_workflow
from app.exit_codes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_OK  # noqa: F401 (re-exported)
from app.plan_gate import plan_before_run
from memory import LoadEvent, MemoryConfig, MemoryManager, TransferEvent, UnloadEvent
from memory.patches import PatchEvent
from nodes.context import Cancelled, CancelToken
from nodes.events import (
    NodeCached,
    NodeFailed,
    NodeFinished,
    NodeLog,
    NodeProgress,
    NodeStarted,
    NodeText,
    RunEvent,
    RunFinished,
    RunStarted,
    describe_progress,
    progress_amount,
    progress_kind,
    progress_rate,
)
from nodes.executor import Executor, RunResult
from nodes.files import write_target_problem
from nodes.modes import prepare_run, skipped_note
from nodes.registry import NodeRegistry
from nodes.run_figures import figures_line, run_figures
from nodes.workflow import Problem, Workflow, WorkflowError, atomic_write_text


@dataclass(frozen=True)
class Override:
    node: str
    param: str
    raw: str


def parse_set(items: list[str]) -> tuple[list[Override], list[str]]:
    """`NODE.PARAM=VALUE` strings -> overrides, plus messages for the malformed ones."""
    overrides, errors = [], []
    for item in items:
        target, sep, raw = item.partition("=")
        node, dot, param = target.partition(".")
        if not sep or not dot or not node or not param:
            errors.append(f"--set {item!r}: expected NODE.PARAM=VALUE, e.g. --set sampler.steps=30")
            continue
        overrides.append(Override(node, param, raw))
    return overrides, errors


def apply_overrides(wf: Workflow, overrides: list[Override], registry: NodeRegistry) -> list[Problem]:
    problems = []
    for o in overrides:
        node = wf.nodes.get(o.node)
        if node is None:
            problems.append(Problem("--set", o.node, o.param, f"no node {o.node!r} in {wf.source}"))
            continue
        spec = registry.get(node.type)
        param = spec.param(o.param) if spec else None
        if param is None:
            problems.append(Problem("--set", o.node, o.param, f"{node.type} has no parameter {o.param!r}"))
            continue
        if o.param in node.inputs:
            link = node.inputs[o.param]
            problems.append(
                Problem(
                    "--set",
                    o.node,
                    o.param,
                    f"fed by a wire from {link.node}.{link.output}; --set would be ignored",
                )
            )
            continue
        node.params[o.param] = param.parse(o.raw)  # the kind's parser, shared with --sweep
    return problems


def _capped(message: str, limit: int = 1000) -> str:
    """A node's error message as shown: a value it quotes whole (a 10 MB text) must not flood the terminal."""
    return message if len(message) <= limit else f"{message[:limit]}… ({len(message):,} characters)"


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:,.1f} MiB"


class HeadlessPrinter:
    """Turns executor events into a rich progress display on stderr and streamed text on stdout."""

    def __init__(self, console: Console, quiet: bool) -> None:
        self.console = console
        self.quiet = quiet
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[amount]}"),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
            disable=quiet,
        )
        self.tasks: dict[tuple[str, str, str], TaskID] = {}
        self.streaming: str | None = None

    def __enter__(self) -> HeadlessPrinter:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(None, None, None)

    def on_memory(self, event: object) -> None:
        """Model loads and unloads, as the memory manager reports them (called on the compute thread)."""
        if isinstance(event, LoadEvent):
            self._say(
                f"    [magenta]load[/] {escape(event.component)} {_mib(event.nbytes)} "
                f"({event.source} -> {event.target}) in {event.seconds:.2f} s"
            )
        elif isinstance(event, UnloadEvent):
            self._say(
                f"    [magenta]unload[/] {escape(event.component)} {_mib(event.nbytes)} in {event.seconds:.2f} s"
            )
        elif isinstance(event, TransferEvent):
            self._say(
                f"    [magenta]transfer[/] {escape(event.component)} {_mib(event.nbytes)} at {event.gbps:.1f} GB/s"
            )
        elif isinstance(event, PatchEvent) and event.mode != "removed":
            self._say(
                f"    [magenta]lora[/] {escape(event.component)}: {escape(event.patches)}, {event.layers} layers "
                f"{event.mode.replace('_', ' ')} (+{_mib(event.nbytes)})"
            )

    def _say(self, message: str) -> None:
        if self.streaming is not None:
            # End the streamed line first, so a status line never lands in the middle of the text.
            sys.stdout.write("\n")
            sys.stdout.flush()
            self.streaming = None
        if not self.quiet:
            self.progress.console.print(message, highlight=False, soft_wrap=True)

    def __call__(self, event: RunEvent) -> None:
        if isinstance(event, RunStarted):
            self._say(f"[bold]run {event.run_index + 1}[/]: {len(event.node_ids)} nodes")
        elif isinstance(event, NodeStarted):
            self._say(f"  [cyan]{escape(event.node_id)}[/] ({escape(event.node_type)}) started")
        elif isinstance(event, NodeProgress):
            # One bar per thing a node does: its steps, and each model it loads or converts.
            kind = progress_kind(event.kind)
            if kind.unit == "stage":  # no amount to show: a line when it starts
                if event.step < event.total:
                    self._say(f"  [dim]{escape(event.node_id)}: {escape(describe_progress(event)[1])}[/]")
                return
            label = event.label if kind.unit == "bytes" else event.label.split(":")[0]
            key = (event.node_id, event.kind, label)
            task = self.tasks.get(key)
            if task is None:
                what = f" {kind.verb} {label}".rstrip() if not kind.timed else ""
                task = self.progress.add_task(
                    f"  {escape(event.node_id)}{escape(what)}", total=event.total, amount="", rate=""
                )
                self.tasks[key] = task
            self.progress.update(
                task,
                completed=event.step,
                total=event.total,
                amount=progress_amount(event),
                # One bar per conversion: its last column names the stage ("reading tokens (1/4)").
                rate=escape(event.label.partition(": ")[2]) if kind.unit == "%" else progress_rate(event),
            )
        elif isinstance(event, NodeText):
            if self.quiet:
                return
            if self.streaming != event.node_id:
                self.streaming = event.node_id
                sys.stdout.write(f"\n[{event.node_id}] ")
            sys.stdout.write(event.delta)
            if event.final:
                sys.stdout.write("\n")
                self.streaming = None
            sys.stdout.flush()
        elif isinstance(event, NodeLog):
            self._say(f"  [dim]{escape(event.node_id)}: {escape(event.message)}[/]")
        elif isinstance(event, NodeCached):
            self._say(f"  [green]{escape(event.node_id)}[/] cached")
        elif isinstance(event, NodeFinished):
            if self.streaming == event.node_id:
                sys.stdout.write("\n")
                sys.stdout.flush()
                self.streaming = None
            files = "".join(f"\n      -> {escape(f)}" for f in event.files)
            self._say(f"  [green]{escape(event.node_id)}[/] done in {event.seconds:.2f} s{files}")
        elif isinstance(event, NodeFailed):
            # In the flow of progress lines; quiet or not, run_headless ends with the same text once.
            self._say(f"  [red]{escape(_capped(event.text))}[/]")
        elif isinstance(event, RunFinished):
            status = "ok" if event.ok else ("cancelled" if event.cancelled else "failed")
            self._say(f"[bold]run {event.run_index + 1} {status}[/] in {event.seconds:.2f} s")


def build_report(wf: Workflow, results: list[RunResult], memory: MemoryManager) -> dict[str, Any]:
    memory_report = memory.report()
    runs = [r.to_json() for r in results]
    for (
        run
    ) in runs:  # frames, seconds of video, videos/hour, images/min, s/step: nodes.run_figures defines them
        run["figures"] = run_figures(run, memory_report.get("steps"))
    return {
        "ok": bool(results) and all(r.ok for r in results),
        "workflow": wf.source,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "runs": runs,
        "memory": memory_report,
    }


def memory_config(args: Any) -> MemoryConfig:
    """The one mapping from the memory flags (--device, --offload, --vram-budget, --ram-budget) to the config
    `--run` and `--sweep` both use; raises ValueError naming a malformed setting."""
    return MemoryConfig(
        device=args.device,
        policy=args.offload,
        vram_budget=args.vram_budget,
        ram_budget=args.ram_budget,
        count_process_rss=True,  # --ram-budget on the CPU is the RSS the run may reach
    )


def run_headless(args: Any, registry: NodeRegistry) -> int:
    err = Console(stderr=True, soft_wrap=True)  # a message to a pipe or file is never hard-wrapped
    overrides, set_errors = parse_set(args.set or [])
    for message in set_errors:
        err.print(f"[red]error[/]: {escape(message)}", highlight=False)
    if set_errors:
        return EXIT_INVALID
    problem = write_target_problem(args.report) if args.report else None
    if problem is not None:
        err.print(f"[red]error[/]: --report {escape(problem)}", highlight=False, soft_wrap=True)
        return EXIT_INVALID
    try:
        # A Nodeloom workflow, or a ComfyUI file imported on the fly; model names through the library.
        # --set before the names are resolved: a path the user sets replaces an imported name.
        wf = load_run_workflow(
            args.run,
            registry,
            library_from(getattr(args, "models_dir", None)),
            edit=lambda wf: apply_overrides(wf, overrides, registry),
        )
    except WorkflowError as exc:
        err.print(f"[red]error[/]: {escape(str(exc))}", highlight=False)
        return EXIT_INVALID
    source = wf
    plan = prepare_run(wf, registry)  # nodes bypassed or muted in the editor run here as they do there
    wf, problems = plan.workflow, plan.problems
    if problems:
        err.print(f"[red]error[/]: {escape(str(WorkflowError(problems)))}", highlight=False)
        return EXIT_INVALID
    note = skipped_note(source, registry, plan.skipped)  # what no output needs is skipped, as in ComfyUI
    if note and not args.quiet:
        err.print(f"[yellow]note[/]: {escape(note)}", highlight=False)
    try:
        memory = MemoryManager(memory_config(args))
    except (ValueError, RuntimeError) as exc:  # a bad --device, --offload or budget
        err.print(f"[red]error[/]: {escape(str(exc))}", highlight=False)
        return EXIT_INVALID
    for note in memory.ignored_settings():  # a setting that does nothing here must say so
        err.print(f"[yellow]warning[/]: {escape(note)}", highlight=False)

    executor = Executor(registry, memory, allow_pickle=args.allow_pickle)
    cancel = CancelToken()

    def on_sigint(signum: int, frame: Any) -> None:
        if cancel.cancelled:
            raise KeyboardInterrupt  # a second Ctrl+C: stop now
        cancel.cancel()
        if cancel.interruptible:  # a long call with no steps (a GGUF conversion): stop it now
            err.print("\n[yellow]cancelling[/]")
            raise Cancelled("cancelled by Ctrl+C")
        err.print("\n[yellow]cancelling at the next step (Ctrl+C again to abort)[/]")

    previous = signal.signal(signal.SIGINT, on_sigint)
    results: list[RunResult] = []
    out_dir = Path(args.out)
    aborted = False
    report_error: str | None = None
    refusal: str | None = None
    plan_report: dict[str, Any] | None = None
    try:
        # The memory plan (no weights loaded): `--offload auto` takes its policy from it; nothing fits: refused.
        # Under the Ctrl+C handler: a loader it runs may be in a long call.
        refusal, plan_report = plan_before_run(wf, registry, memory, err, out_dir, args.quiet, cancel)
        with HeadlessPrinter(err, args.quiet) as printer:
            memory.telemetry.subscribe(printer.on_memory)
            for _ in range(max(1, args.repeat) if refusal is None else 0):
                result = executor.run(
                    wf, out_dir=out_dir, on_event=printer, cancel=cancel, workflow_json=source.to_dict()
                )
                results.append(result)
                if not result.ok:
                    break
    except KeyboardInterrupt:
        aborted = True  # a second Ctrl+C: stop at once, but still write what we know
    finally:
        signal.signal(signal.SIGINT, previous)
        report = build_report(wf, results, memory)
        report["skipped"] = list(plan.skipped)
        report["plan"] = plan_report
        if refusal is not None:
            report["refused"] = refusal
        try:
            if args.report:
                atomic_write_text(Path(args.report), json.dumps(report, indent=2, default=str) + "\n")
        except OSError as exc:  # a full disk, a folder made read-only meanwhile: the outputs stay
            report_error = f"cannot write the report {args.report}: {exc.strerror or exc}"
        finally:
            memory.close()
    if aborted or any(r.cancelled for r in results):
        return EXIT_INTERRUPTED
    if refusal is not None:
        err.print(f"[red]refused[/]: {escape(refusal)}", highlight=False, soft_wrap=True)
        return EXIT_FAILED
    if report_error is not None:
        kept = sum(len(n.files) for r in results for n in r.nodes.values())
        err.print(
            f"[red]error[/]: {escape(report_error)}; the run's {kept} output file(s) under "
            f"{escape(str(out_dir))} are kept",
            highlight=False,
            soft_wrap=True,
        )
        return EXIT_FAILED
    if not report["ok"]:
        err.print(
            f"[red]run failed[/]: {escape(_capped(str(results[-1].error)))}", highlight=False, soft_wrap=True
        )
        return EXIT_FAILED
    if not args.quiet:
        for run in report["runs"]:
            if line := figures_line(run["figures"]):
                err.print(f"run {run['index'] + 1}: {escape(line)}", highlight=False, soft_wrap=True)
        written = [f for r in results for n in r.nodes.values() for f in n.files]
        err.print(
            f"[bold green]done[/]: {len(written)} file(s) under {escape(str(out_dir))}"
            + (f"; report {escape(str(args.report))}" if args.report else "")
        )
    return EXIT_OK
