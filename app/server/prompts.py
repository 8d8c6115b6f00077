"""A request's graph -> a Workflow ready to run, or the problems that refuse it.

Lives here: `RequestRefused`, `ServerLibrary`, `comfy_prompt_workflow`, `native_workflow`. Imports
`nodes.comfy` (public functions: `load_comfy_graph`, `convert_graph`, `unsupported_nodes`), `nodes.model_names`,
`nodes.modes`, `nodes.workflow`, `pipelines`.

Every file name a request gives is someone else's choice, as in an imported ComfyUI file: model and picture
names resolve only inside the models roots and the server's input folder (`nodes.model_names`, whose
`meta.comfyui.names` marks them; here every name field of every node is marked, whatever the client sent),
and the other path fields (a config folder, an embeddings file, an LLM file) take only `builtin:`/`demo:`
names from a request. `ServerLibrary` adds the server's input folder (uploads) in front of the pictures'
search folders.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import Any

from nodes.comfy.api_format import ComfyFormatError, is_api_format
from nodes.comfy.convert import COMFY_META_KEY, convert_graph, unsupported_nodes
from nodes.comfy.mapping import MapContext
from nodes.comfy.sources import load_comfy_graph
from nodes.model_names import imported_names, name_params, resolve_model_names
from nodes.modes import runnable
from nodes.problems import Problem
from nodes.registry import NodeRegistry
from nodes.workflow import FORMAT, Workflow, parse_workflow
from pipelines.diffusion.families import FAMILIES
from pipelines.models_library import ModelsLibrary, NameEscapeError, detect_family
from pipelines.paths import ModelNotFoundError, resolve_model_path

_SCHEMES = ("builtin:", "demo:")


class RequestRefused(Exception):
    """The graph cannot run here: `problems` says why, `unsupported` the node ids whose type is missing,
    `classes` each node's class as the client named it."""

    def __init__(
        self, problems: list[Problem], unsupported: Iterable[str] = (), classes: dict[str, str] | None = None
    ) -> None:
        self.problems = problems
        self.unsupported = set(unsupported)
        self.classes = classes or {}
        super().__init__("; ".join(str(p) for p in problems[:5]))


class ServerLibrary(ModelsLibrary):
    """The models library, with the server's input folder (where `/upload/image` writes) searched first for
    pictures: a ComfyUI client uploads a picture, then names it in a LoadImage."""

    def __init__(self, roots: Iterable[Path | str], input_dir: Path) -> None:
        super().__init__(roots)
        self.input_dir = Path(input_dir)

    def __bool__(self) -> bool:
        return True  # the input folder is always there to look in

    def input_folders(self) -> list[Path]:
        return [self.input_dir, *(f for f in super().input_folders() if f != self.input_dir)]


def _family_detector(library: ModelsLibrary) -> Callable[[str], str | None]:
    """The family a checkpoint name means, from the header of the file it finds inside the roots (as
    `app --run` imports); None when not found or when the name would leave them (refused later)."""

    def detect(name: str) -> str | None:
        try:
            found = library.find_inside(name)
        except NameEscapeError:
            return None
        family = detect_family(found) if found is not None else None
        return family if family in FAMILIES else None

    return detect


def _confine_every_name(data: dict[str, Any]) -> None:
    """Mark every model and picture name of every node as the request's, so each resolves only inside."""
    nodes = data.get("nodes")
    if not isinstance(nodes, dict):
        return
    meta = data.get("meta") if isinstance(data.get("meta"), dict) else {}
    comfy = meta.get(COMFY_META_KEY) if isinstance(meta.get(COMFY_META_KEY), dict) else {}
    comfy["names"] = imported_names({k: v for k, v in nodes.items() if isinstance(v, dict)})
    meta[COMFY_META_KEY] = comfy
    data["meta"] = meta


def _other_path_problems(
    wf: Workflow, registry: NodeRegistry, source: str, resolved: set[tuple[str, str]]
) -> list[Problem]:
    """Path fields that are not model or picture names take only `builtin:`/`demo:` from a request
    (`resolved`: fields the server itself filled with a file it found inside the roots)."""
    problems = []
    for nid, node in wf.nodes.items():
        spec = registry.get(node.type)
        named = set(name_params(node.type))
        for param in spec.params if spec is not None else ():
            value = node.params.get(param.name)
            if param.kind.name != "path" or param.name in named or not value or param.name in node.inputs:
                continue
            if (nid, param.name) in resolved:
                continue
            if isinstance(value, str) and value.startswith(_SCHEMES):
                try:
                    resolve_model_path(value)  # confined to its folder; a missing one is the loader's to say
                except ModelNotFoundError:
                    pass
                except NameEscapeError as exc:
                    problems.append(Problem(source, nid, param.name, str(exc)))
                continue
            problems.append(
                Problem(
                    source,
                    nid,
                    param.name,
                    "a request may not name a path here (only builtin: or demo: names); files reach the "
                    "server through the models folders and /upload/image",
                )
            )
    return problems


def _finish(
    data: dict[str, Any],
    registry: NodeRegistry,
    library: ModelsLibrary,
    source: str,
    resolved: Collection[tuple[str, str]] = (),
) -> Workflow:
    meta = data.get("meta")
    comfy = meta.get(COMFY_META_KEY) if isinstance(meta, dict) else None
    classes = comfy.get("classes") if isinstance(comfy, dict) else None
    classes = classes if isinstance(classes, dict) else {}
    gone = unsupported_nodes(data, registry)
    problems = [Problem(source, u.node, "type", f"{u.class_type}: {u.reason}") for u in gone]
    _confine_every_name(data)
    wf, validation = parse_workflow(data, registry, source=source)
    said = {p.node for p in problems}
    problems += [p for p in validation if not (p.node in said and p.field == "type")]
    if problems:
        raise RequestRefused(problems, {u.node for u in gone}, classes)
    wf, problems = runnable(wf, registry)  # bypassed and muted nodes, as the editor runs them
    problems += _other_path_problems(wf, registry, source, set(resolved))
    if not problems:
        problems = resolve_model_names(wf, library)
    if problems:
        raise RequestRefused(problems, (), classes)
    return wf


def comfy_prompt_workflow(
    prompt: Any, registry: NodeRegistry, library: ModelsLibrary, source: str
) -> tuple[Workflow, list[str]]:
    """ComfyUI's API graph -> (workflow, import notes); raises RequestRefused."""
    if not is_api_format(prompt):
        raise RequestRefused(
            [Problem(source, None, None, "'prompt' must be a ComfyUI API graph: {id: {class_type, inputs}}")]
        )
    try:
        graph = load_comfy_graph(prompt, source)
    except ComfyFormatError as exc:
        raise RequestRefused([Problem(source, None, None, str(exc))]) from None
    result = convert_graph(
        graph, registry, MapContext(graph, _family_detector(library)), title="ComfyUI prompt"
    )
    return _finish(result.workflow, registry, library, source), [str(n) for n in result.notes]


def native_workflow(
    data: Any,
    registry: NodeRegistry,
    library: ModelsLibrary,
    source: str,
    resolved: set[tuple[str, str]] | None = None,
) -> Workflow:
    """A Nodeloom workflow (`{"format": "nodeloom.workflow", ...}`) sent to `/run`, or built by the server
    (`resolved`: the path fields it filled itself, from names it found inside the roots); raises
    RequestRefused."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise RequestRefused(
            [Problem(source, None, "format", f"'workflow' must be a Nodeloom workflow (format {FORMAT!r})")]
        )
    return _finish(copy.deepcopy(data), registry, library, source, resolved or ())
