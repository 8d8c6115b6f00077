"""ControlNet node types: load a ControlNet, apply it (with a control picture) to conditioning.

Lives here: `NODES` (LoadControlNet, ApplyControlNet). May import: nodes.*, pipelines.*.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nodes.context import NodeContext
from nodes.spec import Input, NodeSpec, Output, Param
from nodes.types import CONDITIONING, CONTROL_NET, IMAGE
from pipelines.diffusion.families import DIFFUSION_IMPORTS

if TYPE_CHECKING:  # torch-heavy: imported when a node runs, so listing node types stays light
    import torch

    from pipelines.diffusion.controlnet import ControlNetRef
    from pipelines.diffusion.values import Conditioning


def _run_load_controlnet(ctx: NodeContext, path: str, dtype: str) -> dict[str, Any]:
    ctx.importing(*DIFFUSION_IMPORTS)
    from pipelines.diffusion.controlnet import load_controlnet
    from pipelines.diffusion.families import FAMILIES, resolve_dtype
    from pipelines.paths import resolve_model_path

    if not path:
        raise ValueError("field 'path': choose a ControlNet (a diffusers folder with config.json)")
    folder = resolve_model_path(path)
    ref = load_controlnet(
        ctx.memory,
        folder,
        resolve_dtype(dtype, FAMILIES["sd"], ctx.device),
        allow_pickle=ctx.allow_pickle,
    )
    return {"controlnet": ref}


def _run_apply_controlnet(
    ctx: NodeContext,
    positive: Conditioning,
    negative: Conditioning | None,
    controlnet: ControlNetRef,
    image: torch.Tensor,
    strength: float,
    start_percent: float,
    end_percent: float,
) -> dict[str, Any]:
    from pipelines.diffusion.controlnet import ControlHint, attach_control

    if start_percent >= end_percent:
        raise ValueError(f"field 'start_percent': {start_percent} must be below end_percent ({end_percent})")
    hint = ControlHint(controlnet, image, strength, start_percent, end_percent)
    out: dict[str, Any] = {"positive": attach_control(positive, hint)}
    out["negative"] = attach_control(negative, hint) if negative is not None else None
    return out


NODES: tuple[NodeSpec, ...] = (
    NodeSpec(
        type="LoadControlNet",
        title="Load ControlNet",
        category="diffusion/control",
        params=[
            Param(
                "path", "path", default="", file_filter="ControlNet folders (dir)", help="diffusers folder"
            ),
            Param("dtype", "choice", default="auto", choices=("auto", "float32", "float16", "bfloat16")),
        ],
        outputs=[Output("controlnet", CONTROL_NET)],
        run=_run_load_controlnet,
        description="A ControlNet for SD 1.x / SDXL, loaded lazily and placed by the memory manager.",
        tags=("controlnet", "control", "canny", "ControlNetLoader"),
    ),
    NodeSpec(
        type="ApplyControlNet",
        title="Apply ControlNet",
        category="diffusion/control",
        inputs=[
            Input("positive", CONDITIONING),
            Input("negative", CONDITIONING, optional=True),
            Input("controlnet", CONTROL_NET),
            Input("image", IMAGE),
        ],
        params=[
            Param("strength", "float", default=1.0, min=0.0, max=10.0, step=0.05),
            Param("start_percent", "float", default=0.0, min=0.0, max=1.0, step=0.05),
            Param("end_percent", "float", default=1.0, min=0.0, max=1.0, step=0.05),
        ],
        outputs=[Output("positive", CONDITIONING), Output("negative", CONDITIONING)],
        run=_run_apply_controlnet,
        description="Steer the sampler with a control picture (edges, line art...); stack several.",
        tags=("controlnet", "control", "ControlNetApply", "ControlNetApplyAdvanced"),
    ),
)
