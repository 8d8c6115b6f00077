"""`app check FILE... [--json]`: validate Nodeloom workflows and ComfyUI files without running them.

Lives here: `CheckedProblem`, `FileReport`, `check_file`, `check_command`. Imports `app.comfy_commands`
(reading and importing a file, the models library), `nodes`, rich. No Qt.

Many files are checked in one process (one registry, one models library), so a folder of ComfyUI
templates takes seconds. Each problem has a kind:
    unsupported-node    a ComfyUI node with no Nodeloom equivalent (or a type missing from this build)
    unsupported-family  a loader whose model family Nodeloom cannot run (from its `type` or file name)
    missing-model       a model or picture name not found in the models folders
    invalid             anything else: an unreadable file, a wrong value, a missing wire, a name that leaves
                        the models folders
`--json` prints a list of {"file", "ok", "problems": [{"kind", "node", "field", "message"}], "notes"} on
stdout; without it each file gets the human output `app check FILE` always had. Exit 0 when no file has a
problem, 2 otherwise.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from app.comfy_commands import (
    EXIT_INVALID,
    EXIT_OK,
    _import,
    _print_notes,
    _read_any,
    _unsupported,
    _with_unsupported,
    add_models_dir_argument,
    library_from,
)
from app.import_summary import ADD_ROOT_HINT
from nodes.comfy.api_format import ComfyFormatError
from nodes.comfy.sources import check_comfy
from nodes.model_names import resolve_model_names
from nodes.modes import inner_problems, unneeded
from nodes.registry import NodeRegistry
from nodes.workflow import Problem, WorkflowError, parse_workflow
from pipelines.models_library import ModelsLibrary


@dataclass(frozen=True)
class CheckedProblem:
    kind: str  # "unsupported-node", "unsupported-family", "missing-model", "invalid"
    node: str | None
    field: str | None
    message: str
    problem: Problem  # the one-line form `app check FILE` prints

    def as_json(self) -> dict[str, str | None]:
        return {"kind": self.kind, "node": self.node, "field": self.field, "message": self.message}


@dataclass
class FileReport:
    file: str
    problems: list[CheckedProblem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    fatal: str | None = None  # the file could not be read or imported at all

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_json(self) -> dict:
        return {
            "file": self.file,
            "ok": self.ok,
            "problems": [p.as_json() for p in self.problems],
            "notes": list(self.notes),
        }


def _checked(kind: str, problem: Problem) -> CheckedProblem:
    return CheckedProblem(kind, problem.node, problem.field, problem.reason, problem)


def _name_kind(problem: Problem) -> str:
    # resolve_model_names words a name it looked for and did not find "not found" / "does not exist"; its
    # other refusals (a name that leaves the folders, a bad scheme) are invalid input, not a missing file.
    reason = problem.reason.lower()
    return "missing-model" if "not found" in reason or "does not exist" in reason else "invalid"


def check_file(path: Path, registry: NodeRegistry, library: ModelsLibrary) -> FileReport:
    """Every problem of one file (never raises for bad input: an unreadable file is one `invalid`)."""
    report = FileReport(str(path))
    source = str(path)
    try:
        data, comfy = _read_any(path)
        if comfy:
            result = _import(data, path, registry, library)
            report.notes = [str(n) for n in result.notes]
            unsupported = {u.node for u in result.unsupported}
            families = {(f.node, f.field) for f in result.families}
            for problem in check_comfy(result, registry, source):
                if (problem.node, problem.field) in families:
                    kind = "unsupported-family"
                elif problem.node in unsupported and problem.field == "type":
                    kind = "unsupported-node"
                else:
                    kind = "invalid"
                report.problems.append(_checked(kind, problem))
            wf, _ = parse_workflow(result.workflow, registry, source=source)
        else:
            said = {u.node for u in _unsupported(data, registry)}
            wf, problems = _with_unsupported(data, registry, source)
            for problem in problems:
                unsupported = problem.node in said and problem.field == "type"
                report.problems.append(_checked("unsupported-node" if unsupported else "invalid", problem))
    except (ComfyFormatError, WorkflowError) as exc:
        report.fatal = str(exc)  # printed as it is, as `app check FILE` always did
        if isinstance(exc, WorkflowError):
            report.problems += [_checked("invalid", p) for p in exc.problems]
        else:
            message = str(exc).removeprefix(f"{source}: ")
            report.problems.append(_checked("invalid", Problem(source, None, None, message)))
        return report
    # Inside subgraph definitions too, as a run would expand and refuse them (nodes.subgraph_check).
    report.problems += [_checked("invalid", p) for p in inner_problems(wf, registry)]
    # Without a library an imported name is still refused when it says itself that it leaves (absolute, '..').
    names = resolve_model_names(wf, library, find=bool(library))
    skipped = set(unneeded(wf, registry))  # a node no output needs is skipped at run time: its file too
    report.problems += [_checked(_name_kind(p), p) for p in names if p.node not in skipped]
    if not library:
        report.notes.append(
            "model names not checked: no models folder set (--models-dir, or `app models add-root`)"
        )
    elif any(p.kind == "missing-model" for p in report.problems):
        report.notes.append(f"missing model files: {ADD_ROOT_HINT}")
    return report


def check_command(argv: list[str], registry: NodeRegistry) -> int:
    p = argparse.ArgumentParser(prog="app check", description="Validate workflows without running them.")
    p.add_argument("files", type=Path, nargs="+", metavar="FILE")
    p.add_argument("--json", action="store_true", help="print one JSON report of every file on stdout")
    add_models_dir_argument(p)
    args = p.parse_args(argv)
    library = library_from(args.models_dir)
    reports = [check_file(path, registry, library) for path in args.files]
    if args.json:
        print(json.dumps([r.as_json() for r in reports], indent=2, ensure_ascii=False))
    else:
        err = Console(stderr=True, soft_wrap=True)
        for report in reports:
            _print_notes(err, report.notes)
            if report.fatal is not None:
                err.print(f"[red]error[/]: {escape(report.fatal)}", highlight=False)
            elif report.problems:
                error = WorkflowError([c.problem for c in report.problems])
                err.print(f"[red]error[/]: {escape(str(error))}", highlight=False)
            else:
                print(f"{report.file}: ok")
    return EXIT_OK if all(r.ok for r in reports) else EXIT_INVALID
