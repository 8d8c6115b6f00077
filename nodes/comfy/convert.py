"""A ComfyUI graph -> a Nodeloom workflow (as JSON data), with the report of what the user should know.

Lives here: `ImportResult`, `Unsupported`, `convert_graph`, `unsupported_nodes`; re-exports
`COMFY_META_KEY`. Imports `nodes.comfy.*`, `nodes.layout`, `nodes.model_names`, `nodes.registry`, `nodes.workflow` (FORMAT,
VERSION), `pipelines.diffusion.families`.

Node ids are readable (`ksampler`, `vae_decode`: nodes.comfy.readable_ids, applied by nodes.comfy.sources
before conversion) with ComfyUI's ("3", "12:5" inside a subgraph) kept in `meta.comfyui.ids`; a graph
converted without renaming (the server's prompts) keeps ComfyUI's. The workflow's `meta.comfyui` records each node's ComfyUI class; `unsupported_nodes`
reads it to refuse a run with one line per node that this build cannot run (a class with no Nodeloom
equivalent, or a mapped type missing from the registry), naming node id, class and reason. Its
`meta.comfyui.names` records every model and picture name taken from the file, so that those names resolve
only inside the models folders (nodes.model_names) while the user has not replaced them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nodes.comfy.dead_nodes import drop_unused
from nodes.comfy.families import family_from_name
from nodes.comfy.family_check import FamilyProblem, family_problems
from nodes.comfy.gaps import GAP_REASONS
from nodes.comfy.graph import ComfyGraph, ComfyNode, ImportNote, LinkRef
from nodes.comfy.llm_loaders import LLM_OF_KEY, give_llm_loaders, llm_names
from nodes.comfy.mappers import ALL_MAPPERS
from nodes.comfy.mapping import PLACEHOLDER_PREFIX, Constant, Emit, MapContext, PassThrough
from nodes.comfy.mapping_sampling import apply_cfg_rule, note_unapplied_cfg_norms
from nodes.comfy.preview_constants import PREVIEW_TYPE, give_preview_texts, preview_text
from nodes.layout import layered_layout
from nodes.model_names import COMFY_META_KEY, imported_names
from nodes.registry import NodeRegistry
from nodes.workflow import FORMAT, VERSION
from pipelines.diffusion.families import FAMILIES
from pipelines.diffusion.schedulers import FLOW_K_SAMPLERS

__all__ = ["COMFY_META_KEY", "ImportResult", "Unsupported", "convert_graph", "unsupported_nodes"]
_SAMPLERS = ("Sampler", "SamplerAdvanced")
FLUX_DEFAULT_GUIDANCE = 3.5


@dataclass(frozen=True)
class Unsupported:
    node: str
    class_type: str
    reason: str

    def __str__(self) -> str:
        return f"node {self.node} ({self.class_type}): {self.reason}"


@dataclass
class ImportResult:
    workflow: dict[str, Any]
    notes: list[ImportNote] = field(default_factory=list)
    unsupported: list[Unsupported] = field(default_factory=list)
    # Loaders whose model family Nodeloom cannot run (nodes.comfy.family_check), found without the files.
    families: list[FamilyProblem] = field(default_factory=list)


def _placeholder(node_id: str, class_type: str, inputs: dict[str, Any]) -> Emit:
    params = {k: v for k, v in inputs.items() if not isinstance(v, LinkRef)}
    wired = {k: v for k, v in inputs.items() if isinstance(v, LinkRef)}
    return Emit(f"{PLACEHOLDER_PREFIX}{class_type}", params, wired, (), reason=GAP_REASONS.get(class_type))


def _declared_widgets(emit: Emit, node: ComfyNode, registry: NodeRegistry) -> Emit:
    """Our type's params that declare a ComfyUI widget (`Param.comfy`) take that widget's value, or its
    wire, where the mapper did not set them: a param added with a `comfy=` name needs no mapper edit."""
    spec = registry.get(emit.type)
    for param in spec.params if spec is not None else ():
        if not param.comfy or param.name in emit.params or param.name in emit.inputs:
            continue
        value = node.inputs.get(param.comfy)
        if isinstance(value, LinkRef):
            emit.inputs[param.name] = value
        elif value is not None:
            emit.params[param.name] = value
    return emit


# Flow families whose own loop takes (or refuses, with its own message) ComfyUI's k-samplers: the video ones.
_OWN_K_CHECKS = ("wan", "ltx2", "minimax")
# Flow families that run ComfyUI's flow k-samplers (FLOW_K_SAMPLERS) in k loops of their own.
_COMFY_K_FAMILIES = ("wan", "minimax", "zimage")


class _Converter:
    def __init__(self, graph: ComfyGraph, ctx: MapContext, registry: NodeRegistry) -> None:
        self.graph, self.ctx, self.registry = graph, ctx, registry
        self.mapped: dict[str, Emit | PassThrough | Constant] = {}
        self.guided: set[str] = set()  # samplers whose cfg came from a Flux guidance value
        self.cfg_norms: dict[str, tuple[Any, Any, str]] = {}  # sampler -> the CFGNorm its model comes through
        self.llm_of: dict[str, str] = {}  # Load LLM nodes added for TextGenerate -> their text encoder
        self.preview_texts: dict[str, str] = {}  # Show Text id -> the constant its PreviewAny showed
        for node_id, node in graph.nodes.items():
            mapper = ALL_MAPPERS.get(node.class_type)
            if mapper is None:
                self.mapped[node_id] = _placeholder(node_id, node.class_type, node.inputs)
                continue
            mapped = mapper(node, ctx)
            self.mapped[node_id] = (
                _declared_widgets(mapped, node, registry) if isinstance(mapped, Emit) else mapped
            )

    def resolve(self, value: LinkRef, depth: int = 0) -> tuple[list[str] | None, dict[str, Any]]:
        """A ComfyUI link -> ([our node, our output], annotations gathered on the way) or (None, ...)."""
        target = self.mapped.get(value.node)
        if target is None or depth > 64:
            return None, {}
        if isinstance(target, Constant):  # resolved at import: the consumer takes the value as a param
            return None, {"constant": target.values.get(value.slot)}
        if isinstance(target, PassThrough):
            name = target.inputs.get(value.slot)
            upstream = self.graph.nodes[value.node].inputs.get(name) if name else None
            if not isinstance(upstream, LinkRef):  # a constant (an inlined primitive) or nothing
                constant = {"constant": upstream} if upstream is not None else {}
                return None, {**target.annotations, **constant}
            link, notes = self.resolve(upstream, depth + 1)
            return link, {**notes, **target.annotations}  # the nearer pass-through wins
        if target.type.startswith(PLACEHOLDER_PREFIX):
            return [value.node, f"output_{value.slot}"], {}
        name = target.outputs[value.slot] if value.slot < len(target.outputs) else None
        if name is None:
            return None, {}
        return [value.node, name], dict(target.annotations.get(value.slot, {}))

    def node_json(self, node_id: str, emit: Emit) -> dict[str, Any]:
        node = self.graph.nodes[node_id]
        params = dict(emit.params)
        inputs: dict[str, list[str]] = {}
        for port, value in emit.inputs.items():
            if not isinstance(value, LinkRef):
                self._constant(node, emit, port, value, params)
                continue
            link, annotations = self.resolve(value)
            if link is None and annotations.get("constant") is not None:
                self._constant(node, emit, port, annotations["constant"], params)
                continue
            if link is None:
                self.graph.note(
                    node, f"input {port!r} comes from an output Nodeloom does not offer: left unconnected"
                )
                continue
            inputs[port] = link
            self._apply(node_id, emit, port, params, annotations)
        return {"type": emit.type, "params": params, "inputs": inputs}

    def _constant(self, node: ComfyNode, emit: Emit, port: str, value: Any, params: dict[str, Any]) -> None:
        """A constant for `port`: a param takes it; a port that is only a wire of ours cannot (ComfyUI lets
        a primitive or a switch feed any input), so it is left unconnected and said."""
        if emit.type == PREVIEW_TYPE and port == "text":  # a Text node will hold it (preview_constants)
            self.preview_texts[node.id] = preview_text(value)
            return
        spec = self.registry.get(emit.type)
        if spec is not None and spec.input(port) is not None and all(p.name != port for p in spec.params):
            shown = repr(value) if len(repr(value)) <= 60 else f"{repr(value)[:57]}..."
            self.graph.note(
                node,
                f"input {port!r} is the constant {shown} here, and Nodeloom's takes a wire: left unconnected",
            )
            return
        params[port] = value

    def _apply(self, node_id: str, emit: Emit, port: str, params: dict[str, Any], annotations: dict) -> None:
        node = self.graph.nodes[node_id]
        if "guidance" in annotations and emit.type in _SAMPLERS and port == "positive":
            guidance, source = annotations["guidance"]
            params["cfg"] = guidance
            self.guided.add(node_id)
            self.graph.note(
                node,
                f"Flux guidance {guidance} (node {source}) becomes cfg: Nodeloom's Flux sampler takes the "
                "distilled guidance as its cfg",
            )
        if "cfg_norm" in annotations and emit.type in _SAMPLERS and port == "denoiser":
            self.cfg_norms[node_id] = annotations["cfg_norm"]  # applied once the family is known
        if "cache" in annotations and emit.type in _SAMPLERS and port == "denoiser":
            threshold, source = annotations["cache"]
            params["cache"], params["cache_threshold"] = "easy", threshold
            self.graph.note(
                node, f"EasyCache (node {source}) becomes this sampler's cache easy at {threshold}"
            )

    def _family(self, nodes: dict[str, dict[str, Any]], sampler: dict[str, Any]) -> str | None:
        """The family of the model a sampler runs: the loader its denoiser comes from (through LoRAs)."""
        link = sampler["inputs"].get("denoiser")
        for _ in range(32):
            source = nodes.get(link[0]) if link else None
            if source is None:
                return None
            if source["type"] in ("LoadLoRA", "ModelSamplingShift"):  # the same model, patched
                link = source["inputs"].get("denoiser")
                continue
            if "family" in source["params"]:
                return source["params"]["family"]
            path = source["params"].get("path")
            family = self.ctx.detect_family(path) if isinstance(path, str) else None
            return family or family_from_name(path)
        return None

    def workflow_nodes(self) -> dict[str, dict[str, Any]]:
        nodes = {nid: self.node_json(nid, m) for nid, m in self.mapped.items() if isinstance(m, Emit)}
        self.llm_of = give_llm_loaders(nodes, self.graph)  # TextGenerate's text encoder as a Load LLM
        give_preview_texts(nodes, self.preview_texts, self.graph)  # a PreviewAny of a constant
        for nid, data in nodes.items():
            family = self._family(nodes, data) if data["type"] in _SAMPLERS else None
            if family in FAMILIES and FAMILIES[family].flow:
                # Flow models run their own flow-matching Euler loop here (k_euler maps onto it).
                scheduler, schedule = data["params"].get("scheduler"), data["params"].get("sigma_schedule")
                # Wan, MiniMax H3 and Z-Image run ComfyUI's flow samplers too (their own k loops).
                wan_k = family in _COMFY_K_FAMILIES and str(scheduler).removeprefix("k_") in FLOW_K_SAMPLERS
                own_loop = FAMILIES[family].denoiser_call in _OWN_K_CHECKS
                if scheduler != "k_euler" and own_loop and not wan_k:  # Wan runs ComfyUI's flow samplers too
                    self.graph.note(
                        self.graph.nodes[nid],
                        f"{family} runs with flow-matching Euler here; {scheduler!r} needs a DDPM model "
                        "(set the sampler to k_euler)",
                    )
                elif (
                    not own_loop
                    and not wan_k
                    and isinstance(scheduler, str)
                    and scheduler.startswith("k_")
                    and scheduler != "k_euler"
                ):
                    # The image DiTs' loops refuse the other k-samplers (sample_k runs DDPM models only).
                    data["params"]["scheduler"] = "k_euler"
                    self.graph.note(
                        self.graph.nodes[nid],
                        f"approximated: {scheduler!r} runs as flow-matching Euler here (k_euler); Nodeloom's "
                        f"other k-samplers run DDPM-trained models, {family} is a flow-matching one",
                    )
                elif schedule not in ("simple", "normal", None) and not wan_k:
                    self.graph.note(
                        self.graph.nodes[nid],
                        f"{family} uses the model's own shifted sigmas here, not the {schedule!r} schedule",
                    )
        applied_norms: set[str] = set()
        for nid, data in nodes.items():
            family = self._family(nodes, data) if data["type"] in _SAMPLERS else None
            call = FAMILIES[family].denoiser_call if family in FAMILIES else None
            if data["type"] in _SAMPLERS:  # Qwen-Image's pipelines guide otherwise: ComfyUI's rule is set
                norm = apply_cfg_rule(
                    self.graph, self.graph.nodes[nid], data["params"], call, self.cfg_norms.get(nid)
                )
                applied_norms |= {norm} if norm else set()
            offset = FAMILIES[family].comfy_cfg_offset if family in FAMILIES else 0.0
            cfg = data["params"].get("cfg")
            if offset and isinstance(cfg, int | float):
                # ComfyUI guides as neg + cfg * (pos - neg); this family's pipeline as pos + g * (pos - neg).
                data["params"]["cfg"] = max(0.0, float(cfg) - offset)
                self.graph.note(
                    self.graph.nodes[nid],
                    f"ComfyUI's cfg {cfg:g} is {family}'s guidance {data['params']['cfg']:g} "
                    f"(pos + g * (pos - neg); 0 = no guidance)",
                )
        note_unapplied_cfg_norms(self.graph, applied_norms)
        for nid, data in nodes.items():
            if data["type"] in _SAMPLERS and nid not in self.guided and self._family(nodes, data) == "flux":
                # Flux without a FluxGuidance node runs at ComfyUI's default guidance, 3.5; ours reads cfg.
                data["params"]["cfg"] = FLUX_DEFAULT_GUIDANCE
                self.graph.note(
                    self.graph.nodes[nid],
                    f"Flux without FluxGuidance: ComfyUI's default guidance {FLUX_DEFAULT_GUIDANCE} becomes cfg",
                )
        # Our empty video latent is sized from a VAE (ComfyUI's from the node type): the graph's one VAE.
        vaes = [nid for nid, data in nodes.items() if data["type"] in ("LoadVAE", "LoadDiffusionModel")]
        for nid, data in nodes.items():
            if data["type"] == "EmptyVideoLatent" and "vae" not in data["inputs"]:
                if len(vaes) == 1:
                    data["inputs"]["vae"] = [vaes[0], "vae"]
                else:
                    self.graph.note(self.graph.nodes.get(nid), "no single VAE in the graph: connect its vae")
        # ComfyUI's empty latents know their channels from the node type; ours from a wired model.
        for data in nodes.values():
            if data["type"] not in _SAMPLERS or "latent" not in data["inputs"]:
                continue
            source = nodes.get(data["inputs"]["latent"][0])
            if source is not None and source["type"] == "EmptyLatent" and "denoiser" in data["inputs"]:
                if "denoiser" not in source["inputs"] and "vae" not in source["inputs"]:
                    source["inputs"]["denoiser"] = list(data["inputs"]["denoiser"])
        return nodes


def _beside(graph: ComfyGraph, added: str) -> list[float] | None:
    """A place left of the node an added one was made for (`<id>_llm`, `<id>_text`), when that has one."""
    owner = max((nid for nid in graph.nodes if added.startswith(f"{nid}_")), key=len, default=None)
    pos = graph.nodes[owner].pos if owner is not None else None
    return [pos[0] - 360.0, pos[1]] if pos is not None else None


def _ui_section(graph: ComfyGraph, nodes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    ui_nodes: dict[str, Any] = {}
    placed = None
    if not any(graph.nodes[nid].pos is not None for nid in nodes if nid in graph.nodes):
        # API format (no positions): laid out by data flow, so the editor opens a readable graph.
        sources = {nid: [link[0] for link in data["inputs"].values()] for nid, data in nodes.items()}
        placed = layered_layout(list(nodes), sources)
    for node_id in nodes:
        node = graph.nodes.get(node_id)
        if node is None:  # added by the importer (a TextGenerate's Load LLM, a preview's Text)
            if placed is not None:
                ui_nodes[node_id] = {"pos": list(placed[node_id])}
            elif (pos := _beside(graph, node_id)) is not None:
                ui_nodes[node_id] = {"pos": pos}
            continue
        entry: dict[str, Any] = {}
        if node.pos is not None:
            entry["pos"] = list(node.pos)
        elif placed is not None:
            entry["pos"] = list(placed[node_id])
        if node.size is not None:
            entry["size"] = list(node.size)
        if node.title:
            entry["title"] = node.title
        if node.color:
            entry["color"] = node.color
        if node.collapsed:
            entry["collapsed"] = True
        if entry:
            ui_nodes[node_id] = entry
    ui: dict[str, Any] = {"nodes": ui_nodes, "groups": list(graph.groups)}
    if graph.text_notes:
        ui["notes"] = list(graph.text_notes)
    return ui


def unsupported_nodes(workflow: dict[str, Any], registry: NodeRegistry) -> list[Unsupported]:
    """Every node of an imported (ComfyUI) workflow that this build cannot run, with the reason."""
    meta = workflow.get("meta") if isinstance(workflow.get("meta"), dict) else {}
    if not isinstance(meta.get(COMFY_META_KEY), dict):
        return []  # not an import: the usual validation speaks for unknown types
    classes = meta[COMFY_META_KEY].get("classes", {})
    reasons = meta[COMFY_META_KEY].get("reasons", {})
    reasons = reasons if isinstance(reasons, dict) else {}
    out: list[Unsupported] = []
    for node_id, data in (workflow.get("nodes") or {}).items():
        if not isinstance(data, dict):
            continue
        type_ = str(data.get("type", ""))
        class_type = classes.get(node_id, type_)
        if registry.get(type_) is None:
            if type_.startswith(PLACEHOLDER_PREFIX) and isinstance(reasons.get(node_id), str):
                reason = f"not mapped: {reasons[node_id]}"
            elif type_.startswith(PLACEHOLDER_PREFIX):
                reason = "no Nodeloom node does what this ComfyUI node does (unsupported in this build)"
            else:
                reason = f"node type {type_!r} is not in this build"
            out.append(Unsupported(node_id, class_type, reason))
    return out


def convert_graph(graph: ComfyGraph, registry: NodeRegistry, ctx: MapContext, *, title: str) -> ImportResult:
    converter = _Converter(graph, ctx, registry)
    nodes = converter.workflow_nodes()
    # What only a resolved switch's unchosen branch needed: left out, as ComfyUI leaves it unrun.
    nodes = drop_unused(nodes, registry, graph, keep=frozenset(map(str, converter.llm_of.values())))
    # A Load LLM the import added whose LLM Generate was left out reads nothing anyone uses: out too (the
    # export folds it into its text-encoder loader, so keeping it would not survive a round trip).
    read = {
        link[0]
        for node in nodes.values()
        for link in node.get("inputs", {}).values()
        if isinstance(link, list)
    }
    nodes = {nid: node for nid, node in nodes.items() if nid not in converter.llm_of or nid in read}
    workflow = {
        "format": FORMAT,
        "version": VERSION,
        "meta": {
            "title": title,
            "description": f"Imported from a ComfyUI workflow ({graph.source_format} format).",
            COMFY_META_KEY: {
                "source_format": graph.source_format,
                "classes": {
                    nid: graph.nodes[nid].class_type if nid in graph.nodes else "CLIPLoader" for nid in nodes
                },
                # Why a recognised node is not mapped (the plain case only, a wired switch, ...).
                "reasons": {
                    nid: m.reason for nid, m in converter.mapped.items() if isinstance(m, Emit) and m.reason
                },
                # Names from the file: confined to the models folders until the user sets them.
                "names": imported_names(nodes) | llm_names(nodes, converter.llm_of),
                # Our readable id -> ComfyUI's, written back by `app export-comfy`.
                "ids": {
                    nid: graph.nodes[nid].comfy_id
                    for nid in nodes
                    if nid in graph.nodes and graph.nodes[nid].comfy_id
                },
                LLM_OF_KEY: converter.llm_of,
            },
        },
        "nodes": nodes,
        "ui": _ui_section(graph, nodes),
    }
    # A CLIP loader's file matters to the family check when a kept node reads it or the LLM made from it (the
    # templates' switched-off prompt writers keep their loader for the export, but nothing runs it).
    used = read | {source for llm, source in converter.llm_of.items() if llm in read}
    return ImportResult(
        workflow, list(graph.notes), unsupported_nodes(workflow, registry), family_problems(graph, used=used)
    )
