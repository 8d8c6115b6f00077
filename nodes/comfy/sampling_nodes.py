"""ComfyUI's ModelSampling* patches as a node: the denoiser with its sampling schedule changed, so the
sampler it feeds uses ComfyUI's shifted sigmas.

Lives here: the node type `ModelSamplingShift`, the pure function `sampling_config` and `NODES`. Imports
`nodes.declare`, `nodes.kinds`, `nodes.spec`, `nodes.types`, `nodes.context`.

Every sampling loop builds its scheduler from the denoiser's `scheduler_config`, so the patch is a new
config on the same weights (comfy_extras/nodes_model_advanced.py, ComfyUI v0.8.0):

- `sd3` / `auraflow` (ModelSamplingSD3, ModelSamplingAuraFlow; two modes, so that export writes the
  class back: ComfyUI's two differ in the timestep scale they feed the model, which ours know themselves): sigma = shift * t / (1 + (shift - 1) * t)
  (`time_snr_shift`): diffusers' static `shift` is that formula, so the config turns dynamic shifting off
  and sets `shift` (and Wan's `flow_shift`); Qwen-Image's `shift_terminal` stretch is dropped, as ComfyUI
  has none.
- `flux` (ModelSamplingFlux): mu = base_shift + (max_shift - base_shift) * (tokens - 256) / (4096 - 256)
  and sigma = e^mu / (e^mu + 1/t - 1) (`flux_time_shift`): diffusers' dynamic shifting with those two
  values. ComfyUI counts tokens from the node's width/height widgets; ours from the latent being sampled
  (the same in the templates, which wire one size to both): `width`/`height` are kept for the export.
- `discrete` (ModelSamplingDiscrete): the prediction type (eps / v_prediction) and zero terminal SNR
  (`rescale_betas_zero_snr`, read by the k-samplers' sigma table).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from nodes.context import NodeContext
from nodes.declare import Node, node_type, param, wire
from nodes.kinds import BOOL, CHOICE, FLOAT, INT
from nodes.spec import NodeSpec, Output
from nodes.types import DENOISER

if TYPE_CHECKING:
    from pipelines.diffusion.values import DenoiserRef

SHIFT_MODES = ("sd3", "auraflow", "flux", "discrete")  # ComfyUI's node: ModelSampling<Mode>
PREDICTIONS = ("keep", "epsilon", "v_prediction")


def sampling_config(
    config: dict[str, Any],
    mode: str,
    *,
    shift: float = 3.0,
    base_shift: float = 0.5,
    max_shift: float = 1.15,
    prediction: str = "keep",
    zsnr: bool = False,
) -> dict[str, Any]:
    """A scheduler config with ComfyUI's sampling patch applied (see the module docstring)."""
    out = dict(config)
    if mode in ("sd3", "auraflow"):
        out |= {"shift": float(shift), "use_dynamic_shifting": False, "shift_terminal": None}
        if "flow_shift" in out:  # Wan's UniPC config names it so
            out["flow_shift"] = float(shift)
    elif mode == "flux":
        out |= {"use_dynamic_shifting": True, "base_shift": float(base_shift), "max_shift": float(max_shift)}
        out.setdefault("base_image_seq_len", 256)
        out.setdefault("max_image_seq_len", 4096)
        out.setdefault("time_shift_type", "exponential")
    elif mode == "discrete":
        if prediction != "keep":
            out["prediction_type"] = prediction
        out["rescale_betas_zero_snr"] = bool(zsnr)
    else:
        raise ValueError(f"unknown model sampling mode {mode!r}: one of {', '.join(SHIFT_MODES)}")
    return out


@node_type(
    "ModelSamplingShift",
    title="Model Sampling Shift",
    category="diffusion/model",
    outputs=[Output("denoiser", DENOISER)],
    description="The model with its sigma schedule shifted (ComfyUI's ModelSamplingSD3/AuraFlow/Flux/Discrete).",
    tags=("ModelSamplingSD3", "ModelSamplingAuraFlow", "ModelSamplingFlux", "ModelSamplingDiscrete", "shift"),
)
class ModelSamplingShift(Node):
    denoiser: DenoiserRef = wire(DENOISER)
    mode: str = param(CHOICE, "sd3", choices=SHIFT_MODES, help="sd3/auraflow: shift; flux: by image size")
    shift: float = param(FLOAT, 3.0, min=0.0, max=100.0, step=0.01, help="mode shift")
    base_shift: float = param(FLOAT, 0.5, min=0.0, max=100.0, step=0.01, help="mode flux")
    max_shift: float = param(FLOAT, 1.15, min=0.0, max=100.0, step=0.01, help="mode flux")
    width: int = param(INT, 1024, min=16, max=16384, step=8, help="mode flux: ComfyUI's widget (export only)")
    height: int = param(
        INT, 1024, min=16, max=16384, step=8, help="mode flux: ComfyUI's widget (export only)"
    )
    prediction: str = param(CHOICE, "keep", choices=PREDICTIONS, help="mode discrete")
    zsnr: bool = param(BOOL, False, help="mode discrete: zero terminal SNR")

    def run(self, ctx: NodeContext) -> dict[str, Any]:
        config = sampling_config(
            self.denoiser.scheduler_config,
            self.mode,
            shift=self.shift,
            base_shift=self.base_shift,
            max_shift=self.max_shift,
            prediction=self.prediction,
            zsnr=self.zsnr,
        )
        return {"denoiser": replace(self.denoiser, scheduler_config=config)}


NODES: tuple[NodeSpec, ...] = (ModelSamplingShift.spec,)
