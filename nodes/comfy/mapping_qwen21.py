"""ComfyUI's Qwen-Image 2.1 nodes mapped onto Nodeloom's, and the refinements its templates need.

Lives here: `qwen21_mappers`, `is_qwen21_graph`. Imports `nodes.comfy.graph`, `nodes.comfy.mapping` (Emit,
PassThrough and helpers), `nodes.comfy.mapping_sampling` (the plain SamplerCustomAdvanced mapper) and
`pipelines.diffusion.family_detect` (file-name markers), `pipelines.diffusion.families_qwen21` (Turbo's grid).

- TextEncodeQwenImage21 (clip, vae, autogrow `images.image_N`, prompt, negative_prompt, resolution ->
  positive, negative, latent) becomes ours of the same name, the pictures in their `N` order as image1..3.
- QwenImage21Cache (the KV-cache switch on the model) passes the model through: our loop always caches.
- CLIPLoader with type "qwen_image" names Qwen-Image's Qwen2.5-VL; in a Qwen-Image 2.1 graph (a loader's file
  name says 2.1, or a 2.1 node is present) it is the 2.1 Qwen3-VL, so the family becomes "qwenimage21".
- ManualSigmas holding Turbo's shipped grid, feeding a SamplerCustomAdvanced of a 2.1 graph (the Turbo
  templates), folds into our Sampler on scheduler "default", which runs the model's own `sample_sigmas`
  (the same list); any other list stays unsupported.
- BatchImagesNode that only feeds TextGenerate (the prompt enhancer's pictures; our LLM Generate reads text
  only) emits nothing, with a note; any other use stays unsupported.
`qwen21_mappers(earlier)` is merged last (`mappers`): its CLIPLoader, ManualSigmas, SamplerCustomAdvanced and
BatchImagesNode delegate to the earlier tables' mappers of those classes outside these cases.
"""

from __future__ import annotations

import re
from typing import Any

from nodes.comfy.gaps import GAP_REASONS
from nodes.comfy.graph import ComfyGraph, ComfyNode, LinkRef
from nodes.comfy.mapping import Emit, MapContext, Mapper, PassThrough, _emit, _get, unsupported_emit
from nodes.comfy.mapping_sampling import _part, _sampler
from pipelines.diffusion.families_qwen21 import TURBO_SIGMAS
from pipelines.diffusion.family_detect import family_from_file_name

MAX_PICTURES = 3  # our Text Encode (Qwen-Image 2.1) takes image1..image3
_QWEN21_NODES = ("TextEncodeQwenImage21", "QwenImage21Cache")
_NAME_WIDGETS = {"UNETLoader": "unet_name", "CheckpointLoaderSimple": "ckpt_name", "VAELoader": "vae_name"}


def is_qwen21_graph(graph: ComfyGraph) -> bool:
    """Whether the workflow runs Qwen-Image 2.1: one of its nodes, or a model file named as 2.1."""
    for node in graph.nodes.values():
        if node.class_type in _QWEN21_NODES:
            return True
        widget = _NAME_WIDGETS.get(node.class_type)
        if widget and family_from_file_name(node.inputs.get(widget)) == "qwenimage21":
            return True
    return False


def _picture_number(name: str) -> int:
    match = re.search(r"(\d+)$", name)
    return int(match.group(1)) if match else 0


def _text_encode(node: ComfyNode, ctx: MapContext) -> Emit:
    pictures = sorted(
        (k for k, v in node.inputs.items() if k.startswith("images.") and isinstance(v, LinkRef)),
        key=_picture_number,
    )
    if len(pictures) > MAX_PICTURES:
        return unsupported_emit(
            node, f"{len(pictures)} pictures wired; Text Encode (Qwen-Image 2.1) takes at most {MAX_PICTURES}"
        )
    emit = _emit(
        node, "TextEncodeQwenImage21", {}, ("positive", "negative", "latent"), text_encoder="clip", vae="vae"
    )
    for i, name in enumerate(pictures):
        emit.inputs[f"image{i + 1}"] = node.inputs[name]
    return emit  # prompt, negative_prompt, resolution: declared (`comfy=`)


def _clip_loader(earlier: Mapper) -> Mapper:
    def mapper(node: ComfyNode, ctx: MapContext) -> Any:
        emit = earlier(node, ctx)
        if isinstance(emit, Emit) and emit.params.get("family") == "qwenimage" and is_qwen21_graph(ctx.graph):
            emit.params["family"] = "qwenimage21"
        return emit

    return mapper


def _consumers(graph: ComfyGraph, node_id: str) -> list[ComfyNode]:
    return [
        n
        for n in graph.nodes.values()
        if any(isinstance(v, LinkRef) and v.node == node_id for v in n.inputs.values())
    ]


def _sigmas_source(node: ComfyNode, graph: ComfyGraph) -> ComfyNode | None:
    link = node.inputs.get("sigmas")
    source = graph.nodes.get(link.node) if isinstance(link, LinkRef) else None
    return source if source is not None and source.class_type == "ManualSigmas" else None


def _is_turbo_grid(node: ComfyNode) -> bool:
    """Whether a ManualSigmas node holds Qwen-Image 2.1 Turbo's shipped grid (then 0), to print precision."""
    values = _sigma_values(node.inputs.get("sigmas"))
    grid = (*TURBO_SIGMAS, 0.0)
    return len(values) == len(grid) and all(abs(a - b) < 1e-6 for a, b in zip(values, grid, strict=True))


def _manual_sigmas(earlier: Mapper | None) -> Mapper:
    def mapper(node: ComfyNode, ctx: MapContext) -> Any:
        if is_qwen21_graph(ctx.graph) and _is_turbo_grid(node):
            return PassThrough({})  # read by the SamplerCustomAdvanced it feeds (below); emits no node
        if earlier is not None:
            return earlier(node, ctx)
        return unsupported_emit(node, GAP_REASONS.get("ManualSigmas", "a hand-written sigma list"))

    return mapper


def _custom_advanced(earlier: Mapper) -> Mapper:
    def mapper(node: ComfyNode, ctx: MapContext) -> Any:
        manual = _sigmas_source(node, ctx.graph)
        if manual is None or not is_qwen21_graph(ctx.graph) or not _is_turbo_grid(manual):
            return earlier(node, ctx)
        return _turbo_sampler(node, ctx, manual)

    return mapper


def _turbo_sampler(node: ComfyNode, ctx: MapContext, manual: ComfyNode) -> Emit:
    parts = {name: _part(node, ctx, name) for name in ("noise", "guider", "sampler")}
    why = [p for p in parts.values() if isinstance(p, str)]
    if why:
        return unsupported_emit(node, f"not the plain case: {'; '.join(why)}")
    noise, guider, sampler = (parts[n] for n in ("noise", "guider", "sampler"))
    assert isinstance(noise, ComfyNode) and isinstance(guider, ComfyNode) and isinstance(sampler, ComfyNode)
    if guider.class_type == "BasicGuider":
        cfg, positive, negative = 1.0, guider.inputs.get("conditioning"), None
    else:
        cfg, positive, negative = (
            _get(guider, "cfg", 8.0),
            guider.inputs.get("positive"),
            guider.inputs.get("negative"),
        )
    emit = _sampler(
        node,
        ctx,
        noise_on=noise.class_type == "RandomNoise",
        seed=_get(noise, "noise_seed", 0),
        cfg=cfg,
        wires={
            "denoiser": guider.inputs.get("model"),
            "positive": positive,
            "negative": negative,
            "latent": node.inputs.get("latent_image"),
        },
        sampler=sampler,
        sigmas=ComfyNode(manual.id, manual.class_type, {"steps": len(TURBO_SIGMAS)}),
    )
    emit.params["scheduler"] = "default"  # flow-matching Euler over the model's sample_sigmas
    emit.params.pop("sigma_schedule", None)
    ctx.graph.note(
        node,
        "ManualSigmas: Qwen-Image 2.1 Turbo's shipped grid, which scheduler 'default' runs from the model's "
        "sample_sigmas (a Turbo folder's, or the Turbo config of a ComfyUI file named as Turbo)",
    )
    return emit


def _sigma_values(text: Any) -> list[float]:
    if not isinstance(text, str):
        return []
    try:
        return [float(v) for v in text.replace(",", " ").split()]
    except ValueError:
        return []


def _batch_images(earlier: Mapper | None) -> Mapper:
    def mapper(node: ComfyNode, ctx: MapContext) -> Any:
        consumers = _consumers(ctx.graph, node.id)
        if consumers and all(n.class_type == "TextGenerate" for n in consumers):
            ctx.graph.note(
                node, "pictures for TextGenerate left out: the prompt writer runs on its text only here"
            )
            return PassThrough({})
        if earlier is not None:
            return earlier(node, ctx)
        return unsupported_emit(node, GAP_REASONS.get("BatchImagesNode", "batches pictures"))

    return mapper


def qwen21_mappers(earlier: dict[str, Mapper]) -> dict[str, Mapper]:
    """The Qwen-Image 2.1 table over `earlier` (every table merged before it), whose mappers of the same
    classes it delegates to outside a 2.1 graph."""
    return {
        "TextEncodeQwenImage21": _text_encode,
        "QwenImage21Cache": lambda node, ctx: PassThrough({0: "model"}),
        "CLIPLoader": _clip_loader(earlier["CLIPLoader"]),
        "ManualSigmas": _manual_sigmas(earlier.get("ManualSigmas")),
        "SamplerCustomAdvanced": _custom_advanced(earlier["SamplerCustomAdvanced"]),
        "BatchImagesNode": _batch_images(earlier.get("BatchImagesNode")),
    }
