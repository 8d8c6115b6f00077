"""ControlNet node types: load a ControlNet, apply it (with a control picture) to conditioning.

Lives here: the node types LoadControlNet and ApplyControlNet and the `NODES` tuple of their specs. May import: nodes.*, pipelines.*.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodes.context import NodeContext
from nodes.declare import Node, node_type, param, wire
from nodes.kinds import CHOICE, FLOAT, PATH
from nodes.spec import NodeSpec, Output
from nodes.types import CONDITIONING, CONTROL_NET, IMAGE
from pipelines.diffusion.families import DIFFUSION_IMPORTS

if TYPE_CHECKING:  # torch-heavy: imported when a node runs, so listing node types stays light
    import torch

    from pipelines.diffusion.controlnet import ControlNetRef
    from pipelines.diffusion.values import Conditioning


@node_type(
    "LoadControlNet",
    title="Load ControlNet",
    category="diffusion/control",
    outputs=[Output("controlnet", CONTROL_NET)],
    description="A ControlNet for SD 1.x / SDXL, loaded lazily and placed by the memory manager.",
    tags=("controlnet", "control", "canny", "ControlNetLoader"),
)
class LoadControlNet(Node):
    path: str = param(
        PATH, "", file_filter="ControlNet folders (dir)", help="diffusers folder", comfy="control_net_name"
    )
    dtype: str = param(CHOICE, "auto", choices=("auto", "float32", "float16", "bfloat16"))

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        ctx.importing(*DIFFUSION_IMPORTS)
        from pipelines.diffusion.controlnet import load_controlnet
        from pipelines.diffusion.families import FAMILIES, resolve_dtype
        from pipelines.paths import resolve_model_path

        if not self.path:
            raise ValueError("field 'path': choose a ControlNet (a diffusers folder with config.json)")
        folder = resolve_model_path(self.path)
        ref = load_controlnet(
            ctx.memory,
            folder,
            resolve_dtype(self.dtype, FAMILIES["sd"], ctx.device),
            allow_pickle=ctx.allow_pickle,
        )
        return {"controlnet": ref}


@node_type(
    "ApplyControlNet",
    title="Apply ControlNet",
    category="diffusion/control",
    outputs=[Output("positive", CONDITIONING), Output("negative", CONDITIONING)],
    description="Steer the sampler with a control picture (edges, line art...); stack several.",
    tags=("controlnet", "control", "ControlNetApply", "ControlNetApplyAdvanced"),
)
class ApplyControlNet(Node):
    positive: Conditioning = wire(CONDITIONING)
    negative: Conditioning | None = wire(CONDITIONING, optional=True)
    controlnet: ControlNetRef = wire(CONTROL_NET)
    image: torch.Tensor = wire(IMAGE)
    strength: float = param(FLOAT, 1.0, min=0.0, max=10.0, step=0.05, comfy="strength")
    start_percent: float = param(FLOAT, 0.0, min=0.0, max=1.0, step=0.05, comfy="start_percent")
    end_percent: float = param(FLOAT, 1.0, min=0.0, max=1.0, step=0.05, comfy="end_percent")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.diffusion.controlnet import ControlHint, attach_control

        start, end = self.start_percent, self.end_percent
        if start >= end:
            raise ValueError(f"field 'start_percent': {start} must be below end_percent ({end})")
        hint = ControlHint(self.controlnet, self.image, self.strength, start, end)
        out: dict[str, Any] = {"positive": attach_control(self.positive, hint)}
        out["negative"] = attach_control(self.negative, hint) if self.negative is not None else None
        return out


NODES: tuple[NodeSpec, ...] = (LoadControlNet.spec, ApplyControlNet.spec)
