"""The ComfyUI and models-library subcommands: `app import`, `app check`, `app export-comfy`, `app models`.

Lives here: `import_command`, `check_command`, `export_command`, `models_library_command`, `library_from`,
`load_run_workflow`. Imports `nodes`, `pipelines`, rich. No Qt.

    app import FILE [-o OUT.json]        ComfyUI API/UI JSON or PNG -> a Nodeloom workflow (always written;
                                         unsupported nodes listed, by id, class and reason)
    app check FILE                       validate only (a Nodeloom workflow or a ComfyUI file): exit 0, or 2
                                         with every problem
    app export-comfy WORKFLOW OUT.json   a workflow of mapped nodes -> ComfyUI API format
    app models list|roots|add-root|remove-root
Every command takes `--models-dir DIR` (repeatable); the saved roots (`app models add-root`) and
NODELOOM_MODELS_DIRS are searched after them.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from nodes.comfy.api_format import ComfyFormatError, is_api_format
from nodes.comfy.convert import ImportResult, unsupported_nodes
from nodes.comfy.export import ExportError, export_api
from nodes.comfy.sources import check_comfy, import_comfy, read_comfy_data
from nodes.comfy.ui_format import is_ui_format
from nodes.model_names import resolve_model_names
from nodes.modes import is_wiring_problem, unneeded
from nodes.registry import NodeRegistry
from nodes.workflow import (
    FORMAT,
    Problem,
    Workflow,
    WorkflowError,
    atomic_write_text,
    parse_workflow,
    read_workflow_json,
    workflow_from_dict,
)
from pipelines.diffusion.families import FAMILIES
from pipelines.models_library import (
    ModelsLibrary,
    NameEscapeError,
    detect_family,
    load_saved_roots,
    roots_from_env,
    save_roots,
)

EXIT_OK, EXIT_INVALID = 0, 2


def add_models_dir_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--models-dir",
        action="append",
        type=Path,
        default=[],
        metavar="DIR",
        help="a models folder (ComfyUI-style with checkpoints/, vae/, ... or flat); repeatable",
    )


def library_from(dirs: list[Path] | None) -> ModelsLibrary:
    """--models-dir folders first, then NODELOOM_MODELS_DIRS, then the saved setting."""
    return ModelsLibrary([*(dirs or []), *roots_from_env(), *load_saved_roots()])


def _family_detector(library: ModelsLibrary):
    def detect(name: str) -> str | None:
        try:  # the name comes from the ComfyUI file: only a header inside the models folders is read
            found = library.find_inside(name) if library else None
        except NameEscapeError:
            return None  # `app check` and `--run` refuse it, naming node and field
        family = detect_family(found) if found is not None else None
        return family if family in FAMILIES else None  # a part ("text_encoder", "lora") names no family

    return detect


def _is_comfy(data: Any) -> bool:
    """A ComfyUI file (anything else, even a damaged Nodeloom file, gets Nodeloom's own validation)."""
    if isinstance(data, dict) and data.get("format") == FORMAT:
        return False
    return is_api_format(data) or is_ui_format(data)


def _read_any(path: Path) -> Any:
    """A Nodeloom workflow's JSON, or a ComfyUI file's (JSON, or a PNG's chunks)."""
    if path.suffix.lower() == ".png":
        try:
            return read_workflow_json(path)  # a Nodeloom PNG
        except WorkflowError as ours:
            try:
                return read_comfy_data(path)
            except (ComfyFormatError, ValueError, OSError):
                # Not a ComfyUI PNG either: our reader's message says what is wrong with the file.
                raise ours from None
    return read_workflow_json(path)


def _import(path: Path, registry: NodeRegistry, library: ModelsLibrary) -> ImportResult:
    return import_comfy(path, registry, detect_family=_family_detector(library))


def _check_problems(
    path: Path, registry: NodeRegistry, library: ModelsLibrary
) -> tuple[list[Problem], list[str]]:
    """(problems, notes) for a Nodeloom workflow or a ComfyUI file."""
    source = str(path)
    data = _read_any(path)
    notes: list[str] = []
    if not _is_comfy(data):
        problems = [
            Problem(source, u.node, "type", f"{u.class_type}: {u.reason}")
            for u in unsupported_nodes(data, registry)
        ]
        wf, validation = parse_workflow(data, registry, source=source)
        said = {p.node for p in problems}
        problems += [p for p in validation if not (p.node in said and p.field == "type")]
    else:
        result = _import(path, registry, library)
        notes = [str(n) for n in result.notes]
        problems = check_comfy(result, registry, source)
        wf, _ = parse_workflow(result.workflow, registry, source=source)
    # Without a library an imported name is still refused when it says itself that it leaves (absolute, '..').
    problems += resolve_model_names(wf, library, find=bool(library))
    if not library:
        notes.append("model names not checked: no models folder set (--models-dir, or `app models add-root`)")
    return problems, notes


def load_run_workflow(
    path: Path,
    registry: NodeRegistry,
    library: ModelsLibrary,
    edit: Callable[[Workflow], list[Problem]] | None = None,
) -> Workflow:
    """What `app --run` runs: a Nodeloom workflow, or a ComfyUI file imported on the fly; raises
    WorkflowError listing every problem, unsupported ComfyUI nodes first (id, class, reason).

    `edit` (the `--set` overrides) changes the graph before its file names are resolved, so a path the
    user sets replaces the imported one instead of being checked after it."""
    data = _read_any(path)
    if _is_comfy(data):
        try:
            data = _import(path, registry, library).workflow
        except ComfyFormatError as exc:
            raise WorkflowError([Problem(str(path), None, None, str(exc))]) from exc
    problems = [
        Problem(str(path), u.node, "type", f"{u.class_type}: {u.reason}")
        for u in unsupported_nodes(data, registry)
    ]
    wf, validation = parse_workflow(data, registry, source=str(path))
    said = {p.node for p in problems}  # an unsupported node's "unknown type" is already said, with its reason
    # A node no output needs is skipped at run time (nodes.modes.prepare_run): its wiring is not the run's.
    skipped = set(unneeded(wf, registry))
    problems += [
        p
        for p in validation
        if not (p.node in said and p.field == "type")
        and not (p.node in skipped and is_wiring_problem(wf, registry, p))
    ]
    if problems:
        raise WorkflowError(problems)
    problems = edit(wf) if edit is not None else []
    if problems:
        raise WorkflowError(problems)
    # Always: names an imported file gave must be found inside the models folders, even with none set.
    problems = resolve_model_names(wf, library)
    if problems:
        raise WorkflowError(problems)
    return wf


def _print_notes(console: Console, notes: list[str]) -> None:
    for note in notes:
        console.print(f"[yellow]note[/]: {escape(note)}", highlight=False)


def import_command(argv: list[str], registry: NodeRegistry) -> int:
    p = argparse.ArgumentParser(
        prog="app import", description="Import a ComfyUI workflow (API/UI JSON or PNG)."
    )
    p.add_argument("file", type=Path)
    p.add_argument(
        "-o", "--out", type=Path, help="where to write the workflow (default ./NAME.nodeloom.json)"
    )
    add_models_dir_argument(p)
    args = p.parse_args(argv)
    err = Console(stderr=True, soft_wrap=True)
    library = library_from(args.models_dir)
    try:
        result = _import(args.file, registry, library)
    except ComfyFormatError as exc:
        err.print(f"[red]error[/]: {escape(str(exc))}", highlight=False)
        return EXIT_INVALID
    out = args.out or Path(f"{args.file.stem}.nodeloom.json")
    if out.resolve() == args.file.resolve():
        err.print(f"[red]error[/]: {out} is the input file; choose another with -o", highlight=False)
        return EXIT_INVALID
    atomic_write_text(out, json.dumps(result.workflow, indent=2, ensure_ascii=False) + "\n")
    _print_notes(err, [str(n) for n in result.notes])
    for u in result.unsupported:
        err.print(f"[red]unsupported[/]: {escape(str(u))}", highlight=False)
    count = len(result.workflow["nodes"])
    verdict = (
        f"; {len(result.unsupported)} unsupported node(s): it will not run here" if result.unsupported else ""
    )
    print(f"imported {count} node(s) from {args.file} -> {out}{verdict}")
    return EXIT_OK


def check_command(argv: list[str], registry: NodeRegistry) -> int:
    p = argparse.ArgumentParser(prog="app check", description="Validate a workflow without running it.")
    p.add_argument("file", type=Path)
    add_models_dir_argument(p)
    args = p.parse_args(argv)
    err = Console(stderr=True, soft_wrap=True)
    try:
        problems, notes = _check_problems(args.file, registry, library_from(args.models_dir))
    except (ComfyFormatError, WorkflowError) as exc:
        err.print(f"[red]error[/]: {escape(str(exc))}", highlight=False)
        return EXIT_INVALID
    _print_notes(err, notes)
    if problems:
        err.print(f"[red]error[/]: {escape(str(WorkflowError(problems)))}", highlight=False)
        return EXIT_INVALID
    print(f"{args.file}: ok")
    return EXIT_OK


def export_command(argv: list[str], registry: NodeRegistry) -> int:
    p = argparse.ArgumentParser(
        prog="app export-comfy", description="Write a workflow as ComfyUI API format."
    )
    p.add_argument("workflow", type=Path)
    p.add_argument("out", type=Path)
    args = p.parse_args(argv)
    err = Console(stderr=True, soft_wrap=True)
    try:
        wf = workflow_from_dict(read_workflow_json(args.workflow), registry, source=str(args.workflow))
        prompt = export_api(wf, registry)
    except (WorkflowError, ExportError) as exc:
        err.print(f"[red]error[/]: {escape(str(exc))}", highlight=False)
        return EXIT_INVALID
    atomic_write_text(args.out, json.dumps(prompt, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {len(prompt)} ComfyUI node(s) to {args.out}")
    return EXIT_OK


def _size(nbytes: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if nbytes < 1024 or unit == "GiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    return str(nbytes)


def models_library_command(action: str, argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog=f"app models {action}")
    if action in ("add-root", "remove-root"):
        p.add_argument("dir", type=Path)
    else:
        add_models_dir_argument(p)
    args = p.parse_args(argv)
    # Piped output (scripts, tests) gets the whole table, never columns squeezed to 80 characters.
    console = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 400)
    if action == "add-root":
        roots = load_saved_roots()
        folder = args.dir.expanduser().resolve()
        if not folder.is_dir():
            Console(stderr=True, soft_wrap=True).print(
                f"[red]error[/]: {escape(str(folder))} is not a folder", highlight=False
            )
            return EXIT_INVALID
        if folder not in roots:
            roots.append(folder)
        print(f"models roots saved in {save_roots(roots, atomic_write_text)}")
        return EXIT_OK
    if action == "remove-root":
        folder = args.dir.expanduser().resolve()
        roots = [r for r in load_saved_roots() if r != folder]
        print(f"models roots saved in {save_roots(roots, atomic_write_text)}")
        return EXIT_OK
    library = library_from(args.models_dir)
    if action == "roots":
        for root in library.roots:
            style = "ComfyUI-style" if library.is_comfy_root(root) else "flat"
            print(f"{root}  ({style})")
        return EXIT_OK
    table = Table("name", "kind", "family", "format", "size", "root")
    for entry in library.entries():
        table.add_row(
            entry.name, entry.kind or "-", entry.family, entry.format, _size(entry.size), str(entry.root)
        )
    console.print(table)
    if not library:
        print("no models folder set: use --models-dir DIR or `app models add-root DIR`")
    return EXIT_OK
