"""The ComfyUI and models-library subcommands: `app import`, `app check`, `app export-comfy`, `app models`.

Lives here: `import_command`, `export_command`, `models_library_command`, `library_from`,
`load_run_workflow`. Imports `nodes`, `pipelines`, rich. No Qt.

    app import FILE [-o OUT.json]        ComfyUI API/UI JSON or PNG -> a Nodeloom workflow (always written
                                         when readable; unsupported nodes and every problem `app check`
                                         would report listed, by id, class and reason)
    app check FILE... [--json]           validate only: app/comfy_check.py
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

from app.import_summary import summary_lines
from app.models_dir_arg import add_models_dir_argument  # noqa: F401 (re-exported: plan, serve)
from nodes.comfy.api_format import ComfyFormatError, is_api_format
from nodes.comfy.convert import COMFY_META_KEY, ImportResult, Unsupported, unsupported_nodes
from nodes.comfy.export import ExportError, export_api
from nodes.comfy.sources import COMFY_PNG_KEYS, check_comfy, import_comfy_data, read_comfy_data, workflow_text
from nodes.comfy.ui_format import is_ui_format
from nodes.model_names import resolve_model_names
from nodes.modes import is_wiring_problem, unneeded
from nodes.png_text import NODELOOM_KEY
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
from nodes.workflow_json import WorkflowFileError, read_document
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
_PROBLEM_LINES = 20  # problems `app import` lists one by one; `app check` on the file lists them all


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


def _read_any(path: Path) -> tuple[Any, bool]:
    """(the JSON, whether it is a ComfyUI file) of a Nodeloom workflow, a ComfyUI file, or a PNG either
    saved; one reader and its limits for all of them. Raises WorkflowError naming the file."""
    try:
        doc = read_document(
            path, (NODELOOM_KEY, *COMFY_PNG_KEYS), "this PNG has no embedded Nodeloom or ComfyUI workflow"
        )
    except WorkflowFileError as exc:
        raise WorkflowError([Problem(str(path), None, None, str(exc))]) from None
    if doc.png_key is not None:
        return doc.value, doc.png_key in COMFY_PNG_KEYS
    return doc.value, _is_comfy(doc.value)


def _import(data: Any, path: Path, registry: NodeRegistry, library: ModelsLibrary) -> ImportResult:
    return import_comfy_data(
        data, registry, str(path), title=path.stem, detect_family=_family_detector(library)
    )


def _unsupported(data: Any, registry: NodeRegistry) -> list[Unsupported]:
    """`unsupported_nodes` of any JSON value: only an object of nodes (with an object of ComfyUI classes,
    if any) can name some; for every other shape the usual validation says what is wrong."""
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), dict):
        return []
    meta = data.get("meta")
    comfy = meta.get(COMFY_META_KEY) if isinstance(meta, dict) else None
    if isinstance(comfy, dict) and not isinstance(comfy.get("classes", {}), dict):
        return []
    return unsupported_nodes(data, registry)


def _with_unsupported(data: Any, registry: NodeRegistry, source: str) -> tuple[Workflow, list[Problem]]:
    """Validation problems, unsupported ComfyUI nodes first (their "unknown type" said once, with why)."""
    problems = [
        Problem(source, u.node, "type", f"{u.class_type}: {u.reason}") for u in _unsupported(data, registry)
    ]
    wf, validation = parse_workflow(data, registry, source=source)
    said = {p.node for p in problems}
    return wf, problems + [p for p in validation if not (p.node in said and p.field == "type")]


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
    data, comfy = _read_any(path)
    if comfy:
        try:
            data = _import(data, path, registry, library).workflow
        except ComfyFormatError as exc:
            raise WorkflowError(
                [Problem(str(path), None, None, str(exc).removeprefix(f"{path}: "))]
            ) from None
    wf, problems = _with_unsupported(data, registry, str(path))
    # A node no output needs is skipped at run time (nodes.modes.prepare_run): its wiring is not the run's.
    skipped = set(unneeded(wf, registry))
    problems = [p for p in problems if not (p.node in skipped and is_wiring_problem(wf, registry, p))]
    if problems:
        raise WorkflowError(problems)
    problems = edit(wf) if edit is not None else []
    if problems:
        raise WorkflowError(problems)
    # Always: names an imported file gave must be found inside the models folders, even with none set.
    # A skipped node's file is not needed either (ComfyUI validates only what its outputs need).
    problems = [p for p in resolve_model_names(wf, library) if p.node not in skipped]
    if problems:
        raise WorkflowError(problems)
    return wf


def _cannot_write(path: Path, exc: OSError) -> str:
    """Why `path` could not be written, naming the part of the path at fault (a file where a folder
    should be says so, instead of the bare "File exists")."""
    for parent in path.parents:  # the nearest existing one decides
        if parent.exists():
            if not parent.is_dir():
                return f"cannot write {path}: {parent} is a file, not a folder"
            break
    # The temporary file beside the target is ours, not the user's: name only a folder on the way.
    at_fault = Path(exc.filename) if exc.filename else path.parent
    where = f" ({at_fault})" if at_fault.parent != path.parent else ""
    return f"cannot write {path}: {exc.strerror or exc}{where}"


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

    def refuse(message: str) -> int:
        err.print(f"[red]error[/]: {escape(message)}", highlight=False)
        return EXIT_INVALID

    out = args.out or Path(f"{args.file.stem}.nodeloom.json")
    try:
        same = out.resolve() == args.file.resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop
        return refuse(f"{out}: cannot resolve the path ({exc})")
    if same:
        return refuse(f"{out} is the input file; choose another with -o")
    try:
        data = read_comfy_data(args.file)
        result = _import(data, args.file, registry, library)
        text = workflow_text(result.workflow, str(args.file))
    except ComfyFormatError as exc:
        return refuse(str(exc))
    try:
        atomic_write_text(out, text)
    except OSError as exc:
        return refuse(_cannot_write(out, exc))
    _print_notes(err, [str(n) for n in result.notes])
    for u in result.unsupported:
        err.print(f"[red]unsupported[/]: {escape(str(u))}", highlight=False)
    # What `app check` would say of the written file (model names aside), so the two never disagree.
    unsupported = {u.node for u in result.unsupported}
    problems = [
        p
        for p in check_comfy(result, registry, str(out))
        if not (p.node in unsupported and p.field == "type")
    ]
    for problem in problems[:_PROBLEM_LINES]:
        err.print(f"[red]problem[/]: {escape(str(problem))}", highlight=False)
    if len(problems) > _PROBLEM_LINES:
        err.print(f"[red]problem[/]: ... and {len(problems) - _PROBLEM_LINES} more", highlight=False)
    # Every model file missing, with the folders searched (without a library: only what a name says itself).
    wf, _ = parse_workflow(result.workflow, registry, source=str(out))
    names = resolve_model_names(wf, library, find=bool(library))
    for line in summary_lines(result, names, library_set=bool(library)):
        err.print(escape(line), highlight=False)
    count = len(result.workflow["nodes"])
    reasons = [f"{len(result.unsupported)} unsupported node(s)"] if result.unsupported else []
    reasons += [f"{len(problems)} other problem(s)"] if problems else []
    reasons += [f"{len(names)} model file problem(s)"] if names else []
    verdict = f"; {' and '.join(reasons)}: it will not run here" if reasons else ""
    print(f"imported {count} node(s) from {args.file} -> {out}{verdict}")
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
    try:
        atomic_write_text(args.out, json.dumps(prompt, indent=2, ensure_ascii=False) + "\n")
    except OSError as exc:
        err.print(f"[red]error[/]: {escape(_cannot_write(args.out, exc))}", highlight=False)
        return EXIT_INVALID
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
