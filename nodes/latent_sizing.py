"""Which model sizes an Empty Latent left at "model size": the one its sampler uses, when none is wired in.

Lives here: `sizing_link`, `wire_unsized_latents`. Imports `nodes.workflow`, `nodes.registry`, `nodes.types`.

An Empty Latent's width/height 0 means "the native size of the model". In a ComfyUI-style graph the
latent's own model inputs stay unwired (EmptyLatentImage has none): the model is the one the Sampler that
consumes the latent uses. Before a run (`nodes.modes.runnable`) such a latent gets that sampler's denoiser
wired into its optional `denoiser` input, so it is sized by the model it is sampled with, its cache key
follows that model, and the GUI, `app --run` and anything else running `runnable`'s graph agree.
A latent with a model wired in (every shipped workflow wires the VAE) is left as it is.
"""

from __future__ import annotations

from nodes.registry import NodeRegistry
from nodes.types import DENOISER, LATENT
from nodes.workflow import Link, Workflow

_SIZED_BY = ("denoiser", "vae")  # an Empty Latent's optional model inputs; either one sizes it


def _is_unsized(wf: Workflow, registry: NodeRegistry, node_id: str) -> bool:
    node = wf.nodes[node_id]
    spec = registry.get(node.type)
    if spec is None or any(name in node.inputs for name in _SIZED_BY):
        return False
    if any(spec.input(name) is None for name in _SIZED_BY):
        return False
    native = [p.name for p in spec.params if p.zero_is_native_size]
    return bool(native) and any(node.params.get(name, 0) == 0 and name not in node.inputs for name in native)


def sizing_link(wf: Workflow, registry: NodeRegistry, node_id: str) -> Link | None:
    """The denoiser wire of the sampler(s) the latent of `node_id` flows into (through any nodes that pass a
    LATENT on), when they all use one model; None when the node is sized already, or no single model is found."""
    if node_id not in wf.nodes or not _is_unsized(wf, registry, node_id):
        return None
    found: set[Link] = set()
    downstream: set[str] = set()
    todo = [node_id]
    while todo:
        nid = todo.pop()
        for user_id, user in wf.nodes.items():
            spec = registry.get(user.type)
            if spec is None or user_id in downstream:
                continue
            takes = [name for name, link in user.inputs.items() if link.node == nid]
            takes_latent = any((inp := spec.input(name)) is not None and inp.type == LATENT for name in takes)
            if not takes_latent:
                continue
            downstream.add(user_id)
            model = next(
                (user.inputs[i.name] for i in spec.inputs if i.type == DENOISER and i.name in user.inputs),
                None,
            )
            if model is not None:
                found.add(model)  # the sampler: its model sizes the latent; look no further down
            elif any(o.type == LATENT for o in spec.outputs):
                todo.append(user_id)  # a latent step (upscale, noise mask): follow it to its sampler
    if len(found) != 1:
        return None
    link = next(iter(found))
    return None if link.node in downstream or link.node == node_id else link


def wire_unsized_latents(wf: Workflow, registry: NodeRegistry) -> list[str]:
    """Wire each unsized Empty Latent's `denoiser` input to its sampler's model (in place); the ids wired."""
    wired = []
    for nid in list(wf.nodes):
        link = sizing_link(wf, registry, nid)
        if link is not None:
            wf.nodes[nid].inputs["denoiser"] = link
            wired.append(nid)
    return wired
