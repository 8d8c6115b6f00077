"""A Canny ControlNet for the shapes demo model: the edge map sets shape, size and place; the prompt, colours.

Trains a diffusers `ControlNetModel` initialised from shapes-sd's own UNet (`ControlNetModel.from_unet`,
zero convolutions at zero, as in the ControlNet paper) with the UNet, text encoder and VAE frozen. Data:
freshly rendered scenes, their Canny edges (OpenCV, thresholds 100/200, as the CannyEdges node) as the
control picture, and captions whose shape, size and position words are replaced by random ones half the
time, so the ControlNet learns to win over the prompt on geometry while the prompt keeps the colours.

May import only torch, diffusers, transformers, numpy, opencv and this package (never nodes/app/Qt).
Run: ``python -m training.shapes.train_controlnet --out resources/models/shapes-controlnet-canny``.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path

import cv2
import numpy as np
import torch
import torch.nn.functional as F
from diffusers import AutoencoderKL, ControlNetModel, DDPMScheduler, UNet2DConditionModel
from transformers import CLIPTextModel, CLIPTokenizer

from training.shapes.scenes import POSITIONS, SHAPES, SIZES, caption, render_scene, training_scenes
from training.shapes.train_unet import tokenize
from training.shapes.train_vae import seed_everything, to_tensor

# The shipped recipe. A first run at lr 3e-4, batch 32, half the captions swapped, 1,000 steps had not
# started to steer at all (zero convolutions still ~0.005); this one steers clearly.
STEPS = 1_500
CHECKPOINT_EVERY = 200
BATCH = 16
LR = 1e-3
DATASET = 4_000
DATA_SEED = 1234  # not the base model's training seed: new scenes
SWAP_GEOMETRY = 0.8  # how often the caption names another shape/size/place than the picture shows
CAPTION_DROPOUT = 0.1
CANNY_LOW, CANNY_HIGH = 100, 200


def canny_control(pixels: np.ndarray) -> torch.Tensor:
    """(N, 64, 64, 3) uint8 -> (N, 3, 64, 64) float in [0, 1]: white edges on black, as the CannyEdges node."""
    edges = [
        cv2.Canny(cv2.cvtColor(np.ascontiguousarray(p), cv2.COLOR_RGB2GRAY), CANNY_LOW, CANNY_HIGH)
        for p in pixels
    ]
    return torch.from_numpy(np.stack(edges).astype(np.float32) / 255.0)[:, None].repeat(1, 3, 1, 1)


def build_dataset(rng: random.Random, swap: float = SWAP_GEOMETRY) -> tuple[np.ndarray, list[str]]:
    pixels = np.empty((DATASET, 64, 64, 3), dtype=np.uint8)
    captions: list[str] = []
    for i, (scene, _) in enumerate(training_scenes(DATASET, seed=DATA_SEED)):
        pixels[i] = np.asarray(render_scene(scene))
        shape, size, position = scene.shape, scene.size, scene.position
        if rng.random() < swap:
            shape, size, position = rng.choice(SHAPES), rng.choice(SIZES), rng.choice(POSITIONS)
        captions.append(
            caption(
                scene.colour,
                shape,
                scene.background,
                size if rng.random() < 0.5 else None,
                position if rng.random() < 0.5 else None,
            )
        )
    return pixels, captions


def train(
    base: Path,
    out: Path,
    steps: int = STEPS,
    seed: int = 0,
    lr_max: float = LR,
    batch: int = BATCH,
    swap: float = SWAP_GEOMETRY,
) -> None:
    seed_everything(seed)
    rng = random.Random(seed)
    tokenizer = CLIPTokenizer.from_pretrained(str(base / "tokenizer"))
    text_encoder = (
        CLIPTextModel.from_pretrained(str(base / "text_encoder"), dtype=torch.float32)
        .eval()
        .requires_grad_(False)
    )
    vae = AutoencoderKL.from_pretrained(str(base / "vae"), dtype=torch.float32).eval().requires_grad_(False)
    unet = (
        UNet2DConditionModel.from_pretrained(str(base / "unet"), dtype=torch.float32)
        .eval()
        .requires_grad_(False)
    )
    controlnet = ControlNetModel.from_unet(unet, conditioning_embedding_out_channels=(16, 32, 64, 64)).train()
    noise_scheduler = DDPMScheduler.from_pretrained(str(base / "scheduler"))
    noise_scheduler = DDPMScheduler.from_config(noise_scheduler.config)

    pixels, captions = build_dataset(rng, swap)
    controls = canny_control(pixels)
    with torch.no_grad():
        latents = (
            torch.cat(
                [
                    vae.encode(to_tensor(pixels[i : i + 256])).latent_dist.mode()
                    for i in range(0, DATASET, 256)
                ]
            )
            * vae.config.scaling_factor
        )
        ids = tokenize(tokenizer, captions)
        embeds = torch.cat([text_encoder(ids[i : i + 512])[0] for i in range(0, DATASET, 512)])
        empty = text_encoder(tokenize(tokenizer, [""]))[0][0]

    opt = torch.optim.AdamW(controlnet.parameters(), lr=lr_max, weight_decay=1e-2)
    order = torch.Generator().manual_seed(seed)
    start = time.time()
    for step in range(1, steps + 1):
        lr = lr_max * min(1.0, step / 100) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps)))
        for group in opt.param_groups:
            group["lr"] = lr
        idx = torch.randint(0, DATASET, (batch,), generator=order)
        x0, hint, cond = latents[idx], controls[idx], embeds[idx].clone()
        cond[torch.rand(batch, generator=order) < CAPTION_DROPOUT] = empty
        noise = torch.randn(x0.shape, generator=order)
        t = torch.randint(0, noise_scheduler.config.num_train_timesteps, (batch,), generator=order)
        noisy = noise_scheduler.add_noise(x0, noise, t)
        down, mid = controlnet(noisy, t, encoder_hidden_states=cond, controlnet_cond=hint, return_dict=False)
        pred = unet(
            noisy,
            t,
            encoder_hidden_states=cond,
            down_block_additional_residuals=down,
            mid_block_additional_residual=mid,
        ).sample
        loss = F.mse_loss(pred, noise_scheduler.get_velocity(x0, noise, t))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(controlnet.parameters(), 1.0)
        opt.step()
        if step % CHECKPOINT_EVERY == 0 and step < steps:
            # A snapshot, so a run cut short on a busy machine still leaves a usable ControlNet behind.
            controlnet.save_pretrained(str(out / "checkpoint"), safe_serialization=True)
            (out / "checkpoint" / "step.txt").write_text(str(step))
        if step % 100 == 0 or step == steps:
            elapsed = time.time() - start
            print(f"[controlnet] step {step}/{steps} loss {loss.item():.4f} {elapsed:.0f}s", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    controlnet.save_pretrained(str(out), safe_serialization=True)
    (out / "training.json").write_text(
        json.dumps(
            {
                "steps": steps,
                "batch": batch,
                "lr": lr_max,
                "swap_geometry": swap,
                "dataset": DATASET,
                "seconds": round(time.time() - start),
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, default=Path("resources/models/shapes-sd"))
    parser.add_argument("--out", type=Path, default=Path("resources/models/shapes-controlnet-canny"))
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--lr", type=float, default=LR)
    parser.add_argument("--batch", type=int, default=BATCH)
    parser.add_argument(
        "--swap", type=float, default=SWAP_GEOMETRY, help="share of captions with other geometry"
    )
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    train(args.base, args.out, args.steps, lr_max=args.lr, batch=args.batch, swap=args.swap)


if __name__ == "__main__":
    main()
