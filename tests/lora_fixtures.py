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
UNET_SUFFIXES = (
    "attn1.to_q",
    "attn2.to_k",
    "attn1.to_out.0",
    "ff.net.2",
    "attentions.0.proj_in",
    "attn2.to_v",
    "resnets.0.conv1",
)


def unet_layers(unet: torch.nn.Module) -> tuple[str, ...]:
    """The first layer of the UNet ending with each of `UNET_SUFFIXES`, plus the mid block's attn1.to_v."""
    names = [n for n, m in unet.named_modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))]
    picked = [next(n for n in names if n.endswith(suffix)) for suffix in UNET_SUFFIXES]
    picked += [n for n in names if n.startswith("mid_block.") and n.endswith("attn1.to_v")][:1]
    return tuple(dict.fromkeys(picked))


TEXT_LAYERS = ("encoder.layers.0.self_attn.q_proj", "encoder.layers.1.mlp.fc1")
# diffusers' kohya conversion renames CLIP attention to `to_q_lora`, which its loader then fails to place on
# transformers 5's CLIP: the parity files keep kohya text layers to the MLP (attention is tested by weights).
KOHYA_TEXT_LAYERS = ("encoder.layers.1.mlp.fc1",)
SD3_LAYERS = (
    "transformer_blocks.0.attn.to_q",
    "transformer_blocks.0.attn.add_k_proj",
    "transformer_blocks.0.ff.net.2",
)
FLUX_LAYERS = (
    "transformer_blocks.0.attn.to_q",
    "transformer_blocks.0.attn.add_k_proj",
    "transformer_blocks.0.ff.net.2",
    "single_transformer_blocks.0.attn.to_v",
    "single_transformer_blocks.0.proj_mlp",
)


def _factors(
    layer: torch.nn.Module, rank: int, gen: torch.Generator, scale: float
) -> tuple[torch.Tensor, ...]:
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
    if prefix.startswith("lora_te") and not path.startswith("text_model."):
        path = "text_model." + path
    return prefix + path.replace(".", "_")


def real_path(model: torch.nn.Module, path: str) -> str:
    """transformers 5 builds CLIPTextModel without `text_model`, CLIPTextModelWithProjection with it."""
    return path if hasattr(model, path.split(".")[0]) else "text_model." + path


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
    parts = [("lora_unet_", unet, unet_layers(unet))] + [
        (p, m, KOHYA_TEXT_LAYERS) for p, m in text_encoders.items()
    ]
    for prefix, model, layers in parts:
        for layer_path in layers:
            layer_path = real_path(model, layer_path)
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
            layer_path = real_path(model, layer_path)
            down, up = _factors(model.get_submodule(layer_path), rank, gen, scale)
            sd[f"{prefix}.{layer_path}.lora_A.weight"] = down
            sd[f"{prefix}.{layer_path}.lora_B.weight"] = up
    save_file(sd, str(path))
    return path


# kohya's names for Flux layers (BFL layout: fused qkv) and their shapes in terms of the model's width D and
# MLP width M. Not `single_blocks_N_linear1` (qkv + mlp in one matrix): diffusers' converter splits it with
# full-size Flux's widths (3 x 3072 + 12288) written in, so it can't convert one for a tiny model.
KOHYA_FLUX = {
    "lora_unet_double_blocks_0_img_attn_qkv": ("D", "3D"),
    "lora_unet_double_blocks_0_img_attn_proj": ("D", "D"),
    "lora_unet_double_blocks_0_txt_mlp_0": ("D", "M"),
    "lora_unet_single_blocks_0_linear2": ("D+M", "D"),
}


def write_kohya_flux(
    path: Path, transformer: torch.nn.Module, *, seed: int, rank: int = 4, scale: float = 0.2
) -> Path:
    """A kohya Flux file (`lora_unet_double_blocks_*`, `lora_unet_single_blocks_*`, `alpha`)."""
    d = transformer.config.num_attention_heads * transformer.config.attention_head_dim
    m = transformer.get_submodule("single_transformer_blocks.0.proj_mlp").weight.shape[0]
    size = {"D": d, "3D": 3 * d, "M": m, "3D+M": 3 * d + m, "D+M": d + m}
    gen = torch.Generator().manual_seed(seed)
    sd: dict[str, torch.Tensor] = {}
    for name, (fan_in, fan_out) in KOHYA_FLUX.items():
        sd[f"{name}.lora_down.weight"] = torch.randn(rank, size[fan_in], generator=gen) * scale
        sd[f"{name}.lora_up.weight"] = torch.randn(size[fan_out], rank, generator=gen) * scale
        sd[f"{name}.alpha"] = torch.tensor(float(rank) / 2)
    save_file(sd, str(path))
    return path
