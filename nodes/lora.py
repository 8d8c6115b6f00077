"""LoRA and text-encoder tweak nodes: attach a LoRA file at given strengths, set the CLIP skip.

Lives here: the node types `LoadLoRA`, `ClipSkip` and the `NODES` tuple of their specs. Imports `nodes.declare`,
`nodes.kinds`, `nodes.spec`, `nodes.types`, `nodes.context`,
`pipelines.paths`, and `pipelines.diffusion` when a node runs; the patching lives in pipelines/diffusion/lora.py.

The node loads no model: it reads the LoRA file once to check that it fits the model (a clear error when
nothing matches, a log line with counts when only part does) and returns the references with one more
`LoraPatch` appended, so chained LoadLoRA nodes stack in order. Each output depends only on its own input,
the file and its own strength, so changing `strength_model` re-runs the sampler but not the prompt encoders.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from nodes.context import NodeContext
from nodes.declare import Node, node_type, param, wire
from nodes.kinds import FLOAT, INT, PATH
from nodes.spec import NodeSpec, Output
from nodes.types import DENOISER, TEXT_ENCODER
from pipelines.paths import resolve_model_path

if TYPE_CHECKING:  # torch-heavy: imported when a node runs, so listing node types stays light
    from pipelines.diffusion.values import DenoiserRef, TextEncoderRef


_STRENGTH_HELP = "how much of the LoRA to add: 1 as trained, 0 none, negative subtracts it"


@node_type(
    "LoadLoRA",
    tags=("LoraLoader", "LoraLoaderModelOnly"),
    title="Load LoRA",
    category="diffusion/loaders",
    description="A LoRA (kohya/A1111, diffusers/PEFT, LyCORIS LoCon/LoHa, Flux/SD3 layouts) applied to "
    "the denoiser and text encoder(s) when they are placed. Chain several to stack them.",
    outputs=[
        Output("denoiser", DENOISER, depends_on=("denoiser", "path", "strength_model")),
        Output("text_encoder", TEXT_ENCODER, depends_on=("text_encoder", "path", "strength_text")),
    ],
)
class LoadLoRA(Node):
    denoiser: DenoiserRef = wire(DENOISER)
    text_encoder: TextEncoderRef | None = wire(TEXT_ENCODER, optional=True)
    path: str = param(PATH, "", file_filter="LoRA (*.safetensors)", comfy="lora_name")
    strength_model: float = param(
        FLOAT, 1.0, min=-10.0, max=10.0, step=0.05, help=_STRENGTH_HELP, comfy="strength_model"
    )
    strength_text: float = param(
        FLOAT, 1.0, min=-10.0, max=10.0, step=0.05, help=_STRENGTH_HELP, comfy="strength_clip"
    )

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        from pipelines.diffusion.lora import check_lora, make_patch

        denoiser, text_encoder = self.denoiser, self.text_encoder
        if not self.path:
            raise ValueError("field 'path': choose a LoRA .safetensors file")
        file = resolve_model_path(self.path)
        if file.is_dir():
            raise IsADirectoryError(f"field 'path': {file} is a folder; a LoRA is one .safetensors file")
        lora, applied, stray = check_lora(file, denoiser, text_encoder, allow_pickle=ctx.allow_pickle)
        counts = ", ".join(f"{target} {len(layers)}" for target, layers in lora.targets.items())
        ctx.log(f"{file.name}: {lora.layout} layout, {lora.layer_count()} layers ({counts})")
        if stray:
            ctx.log(
                f"warning: {len(stray)} keys of {file.name} apply to nothing in this model "
                f"(e.g. {', '.join(stray[:5])}); {applied} layers will be applied"
            )
        targets = tuple(t for t, layers in lora.targets.items() if layers)
        model_patch = make_patch(file, self.strength_model, targets, allow_pickle=ctx.allow_pickle)
        out_denoiser = dataclasses.replace(denoiser, patches=(*denoiser.patches, model_patch))
        out_text = (
            dataclasses.replace(
                text_encoder,
                patches=(
                    *text_encoder.patches,
                    make_patch(file, self.strength_text, targets, allow_pickle=ctx.allow_pickle),
                ),
            )
            if text_encoder is not None
            else None
        )
        return {"denoiser": out_denoiser, "text_encoder": out_text}


@node_type(
    "ClipSkip",
    tags=("CLIPSetLastLayer",),
    title="CLIP Skip (Set Last Layer)",
    category="diffusion/loaders",
    description="Which CLIP layer the prompt's embeddings come from, as ComfyUI's CLIPSetLastLayer: -1 the "
    "last, -2 the one before (A1111's 'clip skip 2'). SD1.x/2.x normalise it with CLIP's final layer norm; "
    "SDXL/SD3 take it raw. Flux uses only CLIP's pooled vector, which this does not change.",
    outputs=[Output("text_encoder", TEXT_ENCODER)],
)
class ClipSkip(Node):
    text_encoder: TextEncoderRef = wire(TEXT_ENCODER)
    clip_skip: int = param(INT, -1, min=-24, max=-1, comfy="stop_at_clip_layer")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        text_encoder = self.text_encoder
        if not text_encoder.family.has_clip:
            raise ValueError(f"{text_encoder.family.title} has no CLIP text encoder to skip layers of")
        return {"text_encoder": dataclasses.replace(text_encoder, clip_skip=int(self.clip_skip))}


NODES: tuple[NodeSpec, ...] = (LoadLoRA.spec, ClipSkip.spec)
