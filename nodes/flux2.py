"""Reference-picture node types: FLUX.2's reference latents, and how a model places them (ComfyUI's method).

Lives here: the node types ReferenceLatent and ReferenceLatentMethod and the `NODES` tuple of their specs.
May import: nodes.*, pipelines.*.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from nodes.context import NodeContext
from nodes.declare import Node, node_type, param, wire
from nodes.kinds import CHOICE
from nodes.spec import NodeSpec, Output
from nodes.types import CONDITIONING, LATENT

if TYPE_CHECKING:  # torch-heavy: imported when a node runs, so listing node types stays light
    from pipelines.diffusion.values import Conditioning, Latents


@node_type(
    "ReferenceLatent",
    title="Reference Latent",
    category="diffusion/conditioning",
    outputs=[Output("conditioning", CONDITIONING)],
    description="Give the prompt a reference picture (a VAE Encode's latent) to edit from: FLUX.2 [klein] "
    "reads the references of the positive prompt, in the order they were added.",
    tags=("edit", "reference", "ReferenceLatent"),
)
class ReferenceLatent(Node):
    conditioning: Conditioning = wire(CONDITIONING)
    latent: Latents = wire(LATENT)

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        cond = self.conditioning
        return {"conditioning": replace(cond, references=(*cond.references, self.latent))}


# ComfyUI's FluxKontextMultiReferenceLatentMethod choices (it stores "uxo/uno" as "uxo").
_METHODS = ("offset", "index", "uxo/uno", "index_timestep_zero")


@node_type(
    "ReferenceLatentMethod",
    title="Reference Method",
    category="diffusion/conditioning",
    outputs=[Output("conditioning", CONDITIONING)],
    description="How the denoiser places the prompt's reference latents (ComfyUI's "
    "FluxKontextMultiReferenceLatentMethod). Krea 2 reads its references only with a method set "
    "('index_timestep_zero': the references at the clean timestep, as its style-reference LoRA was trained); "
    "the other edit models place theirs as their own pipelines do and ignore it.",
    tags=("edit", "reference", "FluxKontextMultiReferenceLatentMethod"),
)
class ReferenceLatentMethod(Node):
    conditioning: Conditioning = wire(CONDITIONING)
    reference_latents_method: str = param(
        CHOICE, "offset", choices=_METHODS, comfy="reference_latents_method"
    )

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        method = "uxo" if "uxo" in self.reference_latents_method else self.reference_latents_method
        return {"conditioning": replace(self.conditioning, reference_method=method)}


NODES: tuple[NodeSpec, ...] = (ReferenceLatent.spec, ReferenceLatentMethod.spec)
