"""The tiny FLUX.3 demo model (`demo:tiny-flux3`): random weights, fixed seeds, built offline.

Lives here: `build_tiny_flux3`, `TinyFlux3`, `TINY_FLUX3`, `TINY_FLUX3_QWEN3_VL`, `FLUX3_SHIFT`. May import:
stdlib, torch, transformers, diffusers, pipelines.diffusion.demo_flux2 (the tiny FLUX.2 VAE, which FLUX.3
uses), demo_krea2 (the tiny Qwen3-VL vision tower), demo_qwenimage21 (the Qwen3-VL tokenizer).

FLUX.3 is modular only in diffusers (`Flux3ModularPipeline`), so there is no `DiffusionPipeline` to save:
`TinyFlux3` writes the components as a diffusers folder (one subfolder each, a `model_index.json` naming
`Flux3ModularPipeline` and the component classes), as the MiniMax H3 demo does. Sizes chosen to catch
hard-coded assumptions: FLUX.2's tiny VAE (8 latent channels, 4 pixels per latent, batch-norm statistics away
from 0 and 1), so the transformer takes 8 x 2 x 2 = 32 channels (not 128); a 16-wide Qwen3-VL of 32 layers
(the pipeline stacks hidden layers 4, 8, ..., 32), so `joint_attention_dim` is 8 x 16.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from diffusers import AutoencoderKLFlux2, FlowMatchEulerDiscreteScheduler, Flux3Transformer2DModel
from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

from pipelines.diffusion.demo_flux2 import TINY_FLUX2_VAE
from pipelines.diffusion.demo_krea2 import _TINY_VISION
from pipelines.diffusion.demo_qwenimage21 import tiny_qwenimage21_tokenizer

FLUX3_SHIFT = 6.93  # the pipeline's constant timestep shift (Flux3SetTimestepsStep's "alpha")
TINY_FLUX3 = dict(
    in_channels=32,  # 8 latent channels x a 2x2 patch
    cond_in_channels=32,
    num_layers=1,
    num_single_layers=2,
    attention_head_dim=16,
    num_attention_heads=2,
    joint_attention_dim=8 * 16,  # eight stacked Qwen3-VL hidden layers
    timestep_channels=32,
    mlp_ratio=3.0,
    axes_dims_rope=(4, 4, 4, 4),
)
TINY_FLUX3_QWEN3_VL = dict(
    hidden_size=16,
    intermediate_size=24,
    num_hidden_layers=32,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=8,
    rope_parameters={"rope_theta": 1000000.0, "rope_type": "default", "mrope_section": [1, 1, 2]},
)


class TinyFlux3:
    """The components of a FLUX.3 folder, saved the way a diffusers folder is laid out."""

    def __init__(self, components: dict[str, Any]) -> None:
        self.components = components

    def save_pretrained(self, out: str, safe_serialization: bool = True) -> None:
        root = Path(out)
        index: dict[str, Any] = {"_class_name": "Flux3ModularPipeline", "_diffusers_version": "0.42.1"}
        for name, part in self.components.items():
            kwargs = {"safe_serialization": safe_serialization} if hasattr(part, "state_dict") else {}
            part.save_pretrained(str(root / name), **kwargs)
            library = "transformers" if type(part).__module__.startswith("transformers") else "diffusers"
            index[name] = [library, type(part).__name__]
        (root / "model_index.json").write_text(json.dumps(index, indent=2), encoding="utf-8")


def build_tiny_flux3() -> TinyFlux3:
    tokenizer = tiny_qwenimage21_tokenizer()
    ids = {
        t: tokenizer.convert_tokens_to_ids(t) for t in ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>")
    }
    config = Qwen3VLConfig(
        text_config={**TINY_FLUX3_QWEN3_VL, "vocab_size": len(tokenizer)},
        vision_config=_TINY_VISION,
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        image_token_id=ids["<|image_pad|>"],
    )
    torch.manual_seed(0)
    text_encoder = Qwen3VLForConditionalGeneration(config).eval()
    torch.manual_seed(0)
    transformer = Flux3Transformer2DModel(**TINY_FLUX3)
    torch.manual_seed(0)
    vae = AutoencoderKLFlux2(**TINY_FLUX2_VAE)
    with torch.no_grad():  # statistics as a trained VAE has them: neither 0 nor 1
        vae.bn.running_mean.copy_(torch.randn_like(vae.bn.running_mean) * 0.2)
        vae.bn.running_var.copy_(torch.rand_like(vae.bn.running_var) + 0.5)
    components = dict(
        transformer=transformer,
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        scheduler=FlowMatchEulerDiscreteScheduler(shift=FLUX3_SHIFT),
    )
    return TinyFlux3(components)
