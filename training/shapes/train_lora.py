"""Train the shipped example LoRA for shapes-sd: the same scenes drawn as outlines instead of filled shapes.

Holds the outline renderer, a minimal LoRA training loop (low-rank factors beside the frozen UNet's
attention, feed-forward and resnet convolutions, added through forward hooks) and the kohya-format writer.

May import only torch, diffusers, PIL, numpy, safetensors and this package (never ``nodes``/``app``/Qt).
Run: ``OMP_NUM_THREADS=1 python -m training.shapes.train_lora --out resources/models/shapes-sd-loras``
(one CPU thread, a few minutes). The base model, captions and loss are the shapes model's own
(v-prediction, min-SNR-5 with a floor of 1; see train_unet.py); only the pictures change.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from diffusers import AutoencoderKL, UNet2DConditionModel
from PIL import Image, ImageDraw
from safetensors.torch import save_file
from transformers import CLIPTextModel, CLIPTokenizer

from training.shapes.scenes import IMAGE_SIZE, PALETTE, POSITION_X, SIZE_PX, Scene, training_scenes
from training.shapes.train_unet import MIN_SNR_GAMMA, TRAIN_TIMESTEPS, make_noise_scheduler, tokenize

BASE = Path(__file__).resolve().parents[2] / "resources" / "models" / "shapes-sd"
RANK, ALPHA = 8, 8.0
STEPS, BATCH, LR = 800, 8, 2e-3
SCENES = 2048
OUTLINE_WIDTH = 3
# Attention projections, feed-forward and resnet convolutions: an outline is a spatial change, so the
# convolutions (LoCon) carry most of it; attention alone learnt it far more slowly.
TARGET_SUFFIXES = ("to_q", "to_k", "to_v", "to_out.0", "ff.net.2", "proj_in", "proj_out", "conv1", "conv2")


def render_outline(scene: Scene) -> Image.Image:
    """`render_scene` with the shape's outline (3 px) instead of a filled shape."""
    image = Image.new("RGB", (IMAGE_SIZE, IMAGE_SIZE), PALETTE[scene.background])
    draw = ImageDraw.Draw(image)
    extent = SIZE_PX[scene.size] + scene.dsize
    cx, cy = POSITION_X[scene.position] + scene.dx, IMAGE_SIZE // 2 + scene.dy
    x0, y0 = cx - extent // 2, cy - extent // 2
    x1, y1 = x0 + extent - 1, y0 + extent - 1
    colour = PALETTE[scene.colour]
    if scene.shape == "circle":
        draw.ellipse((x0, y0, x1, y1), outline=colour, width=OUTLINE_WIDTH)
    elif scene.shape == "square":
        draw.rectangle((x0, y0, x1, y1), outline=colour, width=OUTLINE_WIDTH)
    else:
        draw.line([(cx, y0), (x1, y1), (x0, y1), (cx, y0)], fill=colour, width=OUTLINE_WIDTH, joint="curve")
    return image


class LoraLayer:
    """Trainable factors for one Linear/Conv2d, added to its output by a forward hook."""

    def __init__(self, layer: torch.nn.Module, gen: torch.Generator) -> None:
        w = layer.weight
        kernel = w.shape[2:] if w.ndim == 4 else ()
        # kohya's init: down small random, up zero, so training starts from the base model exactly.
        self.down = torch.nn.Parameter(
            torch.randn(RANK, w.shape[1], *kernel, generator=gen) / w.shape[1] ** 0.5
        )
        self.up = torch.nn.Parameter(torch.zeros(w.shape[0], RANK, *((1, 1) if kernel else ())))
        self.layer = layer
        self.handle = layer.register_forward_hook(self.hook)

    def hook(self, module: torch.nn.Module, args: tuple, out: torch.Tensor) -> torch.Tensor:
        x = args[0]
        scale = ALPHA / RANK
        if self.down.ndim == 4:
            h = F.conv2d(x, self.down, stride=module.stride, padding=module.padding)
            return out + scale * F.conv2d(h, self.up)
        return out + scale * F.linear(F.linear(x, self.down), self.up)


def encode_scenes(vae: AutoencoderKL, seed: int) -> tuple[torch.Tensor, list[str]]:
    pixels, captions = [], []
    for scene, text in training_scenes(SCENES, seed=seed):
        pixels.append(np.asarray(render_outline(scene), dtype=np.float32) / 127.5 - 1.0)
        captions.append(text)
    x = torch.from_numpy(np.stack(pixels)).permute(0, 3, 1, 2)
    with torch.no_grad():
        latents = torch.cat([vae.encode(chunk).latent_dist.mode() for chunk in x.split(256)])
    return latents * vae.config.scaling_factor, captions


def train(out: Path, seed: int = 0, steps: int = STEPS) -> Path:
    torch.manual_seed(seed)
    random.seed(seed)
    vae = AutoencoderKL.from_pretrained(str(BASE), subfolder="vae", dtype=torch.float32).eval()
    unet = UNet2DConditionModel.from_pretrained(str(BASE), subfolder="unet", dtype=torch.float32).eval()
    text_encoder = CLIPTextModel.from_pretrained(
        str(BASE), subfolder="text_encoder", dtype=torch.float32
    ).eval()
    tokenizer = CLIPTokenizer.from_pretrained(str(BASE), subfolder="tokenizer")
    for p in (*unet.parameters(), *text_encoder.parameters(), *vae.parameters()):
        p.requires_grad_(False)
    latents, captions = encode_scenes(vae, seed=seed + 1)  # other scenes than the base model's seed-0 set
    with torch.no_grad():
        cond_all = text_encoder(tokenize(tokenizer, captions))[0]
    gen = torch.Generator().manual_seed(seed)
    layers = {
        name: LoraLayer(m, gen)
        for name, m in unet.named_modules()
        if isinstance(m, torch.nn.Linear | torch.nn.Conv2d) and name.endswith(TARGET_SUFFIXES)
    }
    params = [p for lora in layers.values() for p in (lora.down, lora.up)]
    opt = torch.optim.AdamW(params, lr=LR, weight_decay=0.0)
    noise_scheduler = make_noise_scheduler()
    snr_all = noise_scheduler.alphas_cumprod / (1 - noise_scheduler.alphas_cumprod)
    start = time.time()
    for step in range(1, steps + 1):
        idx = torch.randint(0, len(latents), (BATCH,), generator=gen)
        x0, cond = latents[idx], cond_all[idx]
        noise = torch.randn(x0.shape, generator=gen)
        t = torch.randint(0, TRAIN_TIMESTEPS, (BATCH,), generator=gen)
        pred = unet(noise_scheduler.add_noise(x0, noise, t), t, encoder_hidden_states=cond).sample
        target = noise_scheduler.get_velocity(x0, noise, t)
        snr = snr_all[t]
        weight = torch.clamp(snr, min=1.0, max=MIN_SNR_GAMMA) / (snr + 1)
        loss = (weight * F.mse_loss(pred, target, reduction="none").mean(dim=(1, 2, 3))).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 100 == 0 or step == steps:
            print(f"[lora] step {step}/{steps} loss {loss.item():.4f} {time.time() - start:.0f}s", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "outline.safetensors"
    save_kohya(layers, path)
    (out / "outline.json").write_text(
        json.dumps(
            {
                "steps": steps,
                "batch": BATCH,
                "lr": LR,
                "rank": RANK,
                "alpha": ALPHA,
                "scenes": SCENES,
                "seconds": round(time.time() - start),
                "layers": len(layers),
                "seed": seed,
            },
            indent=2,
        )
    )
    return path


def save_kohya(layers: dict[str, LoraLayer], path: Path) -> None:
    """kohya/A1111 names (`lora_unet_<path with underscores>`), fp16 factors and an `alpha` per layer."""
    sd: dict[str, torch.Tensor] = {}
    for name, lora in layers.items():
        key = "lora_unet_" + name.replace(".", "_")
        sd[f"{key}.lora_down.weight"] = lora.down.detach().half().contiguous()
        sd[f"{key}.lora_up.weight"] = lora.up.detach().half().contiguous()
        sd[f"{key}.alpha"] = torch.tensor(ALPHA, dtype=torch.float16)
    save_file(sd, str(path), metadata={"ss_network_dim": str(RANK), "ss_network_alpha": str(ALPHA)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(train(args.out, seed=args.seed, steps=args.steps))


if __name__ == "__main__":
    main()
