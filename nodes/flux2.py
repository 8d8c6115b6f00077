"""FLUX.2 node types: reference pictures for editing.

Lives here: the node type ReferenceLatent and the `NODES` tuple of its spec. May import: nodes.*, pipelines.*.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from nodes.context import NodeContext
from nodes.declare import Node, node_type, wire
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


NODES: tuple[NodeSpec, ...] = (ReferenceLatent.spec,)
