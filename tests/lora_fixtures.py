"""Test helpers: LoRA files in kohya/A1111, diffusers/PEFT and LyCORIS layouts, built from a model's layers.

The factors are random with fixed seeds (as diffusers' own LoRA tests build theirs), sized from the real
layers, so a file fits exactly the model it was made from.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file

# Layers a typical SD LoRA trains (attention projections, feed-forward, transformer in/out) plus a resnet
# conv (LoCon); the text encoder gets attention and MLP layers.
UNET_LAYERS = (
    "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q",
    "down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_k",
    "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_out.0",
    "down_blocks.0.attentions.0.transformer_blocks.0.ff.net.2",
    "down_blocks.0.attentions.0.proj_in",
    "mid_block.attentions.0.transformer_blocks.0.attn2.to_v",
    "up_blocks.1.attentions.0.transformer_blocks.0.attn1.to_v",
    "down_blocks.0.resnets.0.conv1",
)
TEXT_LAYERS = ("encoder.layers.1.mlp.fc1",)
FLUX_LAYERS = (
    "transformer_blocks.0.attn.to_q",
    "transformer_blocks.0.attn.add_k_proj",
    "transformer_blocks.0.ff.net.2",
    "single_transformer_blocks.0.attn.to_v",
    "single_transformer_blocks.0.proj_mlp",
)


def _factors(layer: torch.nn.Module, rank: int, gen: torch.Generator, scale: float) -> tuple[torch.Tensor, ...]:
    w = layer.weight
    if w.ndim == 4:  # conv: down carries the kernel, up is 1x1
        down = torch.randn(rank, w.shape[1], *w.shape[2:], generator=gen) * scale
        up = torch.randn(w.shape[0], rank, 1, 1, generator=gen) * scale
    else:
        down = torch.randn(rank, w.shape[1], generator=gen) * scale
        up = torch.randn(w.shape[0], rank, generator=gen) * scale
    return down, up


def kohya_name(prefix: str, path: str) -> str:
    # kohya names a layer by its module path with dots as underscores; CLIP paths keep `text_model`.
    if prefix.startswith("lora_te"):
        path = "text_model." + path
    return prefix + path.replace(".", "_")


def write_kohya(
    path: Path,
    unet: torch.nn.Module,
    text_encoders: dict[str, torch.nn.Module],
    *,
    seed: int,
    rank: int = 4,
    alpha: float = 2.0,
    scale: float = 0.2,
    loha: bool = False,
) -> Path:
    """A kohya/A1111 file (`lora_unet_*`, `lora_te*_*`, `alpha`); `loha=True` writes LyCORIS LoHa factors."""
    gen = torch.Generator().manual_seed(seed)
    sd: dict[str, torch.Tensor] = {}
    parts = [("lora_unet_", unet, UNET_LAYERS)] + [(p, m, TEXT_LAYERS) for p, m in text_encoders.items()]
    for prefix, model, layers in parts:
        for layer_path in layers:
            layer = model.get_submodule(layer_path)
            name = kohya_name(prefix, layer_path)
            if loha:
                if layer.weight.ndim == 4:
                    continue
                out_f, in_f = layer.weight.shape
                sd[f"{name}.hada_w1_a"] = torch.randn(out_f, rank, generator=gen) * scale
                sd[f"{name}.hada_w1_b"] = torch.randn(rank, in_f, generator=gen) * scale
                sd[f"{name}.hada_w2_a"] = torch.randn(out_f, rank, generator=gen) * scale
                sd[f"{name}.hada_w2_b"] = torch.randn(rank, in_f, generator=gen) * scale
            else:
                down, up = _factors(layer, rank, gen, scale)
                sd[f"{name}.lora_down.weight"], sd[f"{name}.lora_up.weight"] = down, up
            sd[f"{name}.alpha"] = torch.tensor(alpha)
    save_file(sd, str(path))
    return path


def write_peft(
    path: Path,
    models: dict[str, torch.nn.Module],
    layers: dict[str, tuple[str, ...]],
    *,
    seed: int,
    rank: int = 4,
    scale: float = 0.2,
) -> Path:
    """A diffusers/PEFT file (`unet.*.lora_A.weight`, `transformer.*`, `text_encoder.*`), as `save_lora_weights`
    writes it for a model whose adapter has lora_alpha == rank."""
    gen = torch.Generator().manual_seed(seed)
    sd: dict[str, torch.Tensor] = {}
    for prefix, model in models.items():
        for layer_path in layers[prefix]:
            down, up = _factors(model.get_submodule(layer_path), rank, gen, scale)
            sd[f"{prefix}.{layer_path}.lora_A.weight"] = down
            sd[f"{prefix}.{layer_path}.lora_B.weight"] = up
    save_file(sd, str(path))
    return path
