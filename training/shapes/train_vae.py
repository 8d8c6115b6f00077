"""Stage 1 of the shapes model: render the synthetic dataset and train its small VAE.

Holds the dataset cache (rendered pixels + captions in the work dir), the VAE architecture and its
autoencoder training loop, the latent-std measurement that sets ``scaling_factor``, and the decoder-only
fine-tune (encoder frozen, so the latents the UNet learns stay the same) that sharpens small shapes.

May import only torch, diffusers, numpy, PIL and this package (never ``nodes``/``app``/Qt).
Run alone with ``python -m training.shapes.train_vae --work DIR``; ``training.shapes.train`` calls it.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from diffusers import AutoencoderKL

from training.shapes.scenes import render_scene, training_scenes

DATASET_SIZE = 20_000
DATA_SEED = 1234
VAE_STEPS = 1_200
VAE_BATCH = 16
VAE_LR = 1e-3
# Small enough that the latent stays an informative code, large enough to keep it smooth and bounded.
KL_WEIGHT = 1e-5
# Decoder-only fine-tune (the encoder, hence the latents the UNet learns, stays fixed): sharpens small shapes.
DECODER_STEPS = 1_500
DECODER_LR = 3e-4
# The decoder sees each latent plus Gaussian noise of up to this fraction of the latents' std (uniform per
# image). Without it the square/circle difference lived in a ~13% latent difference that noise of 0.1-0.2 std
# (the size of a sampler's residual error) erased: squares decoded as blobs, even for training prompts.
# Trained against the noise, the encoder spreads what the decoder must recover (the outline) over a
# margin the UNet can hit, and the decoder learns to snap a near-miss latent to a clean shape.
LATENT_NOISE = 0.3
# Less in the decoder-only fine-tune, whose job is sharpening: the encoder's margins are already set.
DECODER_LATENT_NOISE = 0.1


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def make_vae() -> AutoencoderKL:
    """4 blocks (16, 32, 64, 64), 8x down to 4x8x8 latents, no mid-block attention (~0.94M params)."""
    return AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4,
        block_out_channels=(16, 32, 64, 64),
        layers_per_block=1,
        latent_channels=4,
        norm_num_groups=8,
        sample_size=64,
        mid_block_add_attention=False,
    )


def load_dataset(work: Path, count: int = DATASET_SIZE) -> tuple[np.ndarray, list[str]]:
    """Rendered images (N, 64, 64, 3) uint8 and their captions; the pixels are cached in ``work``.

    Captions are re-derived every time (a fraction of a second), so a change to the caption grammar
    never pairs new code with stale captions from an older run's cache.
    """
    pairs = list(training_scenes(count, seed=DATA_SEED))
    captions = [text for _, text in pairs]
    pixels_path = work / "dataset_pixels.npy"
    if pixels_path.exists():
        pixels = np.load(pixels_path)
        if len(pixels) == count:
            return pixels, captions
    work.mkdir(parents=True, exist_ok=True)
    pixels = np.empty((count, 64, 64, 3), dtype=np.uint8)
    for i, (scene, _) in enumerate(pairs):
        pixels[i] = np.asarray(render_scene(scene))
    np.save(pixels_path, pixels)
    return pixels, captions


def to_tensor(pixels: np.ndarray) -> torch.Tensor:
    """uint8 NHWC -> float NCHW in [-1, 1], the range diffusers' VAEs expect."""
    return torch.from_numpy(pixels).permute(0, 3, 1, 2).float().div(127.5).sub(1.0)


def noisy_latents(latents: torch.Tensor, fraction: float, generator: torch.Generator) -> torch.Tensor:
    """``latents`` plus noise of std ``U(0, fraction) * latents.std()`` per image (see ``LATENT_NOISE``)."""
    if fraction <= 0:
        return latents
    # Relative to the batch's own spread, so the encoder cannot escape the noise by growing its latents.
    level = torch.rand(latents.shape[0], 1, 1, 1, generator=generator) * fraction * latents.detach().std()
    return latents + level * torch.randn(latents.shape, generator=generator)


def train_vae(
    work: Path,
    steps: int = VAE_STEPS,
    seed: int = 0,
    log_every: int = 100,
    latent_noise: float = LATENT_NOISE,
) -> Path:
    """Train the autoencoder; saves ``work/vae`` (float32) with ``scaling_factor`` set, returns the path."""
    out = work / "vae"
    if (out / "done.json").exists():
        print(f"[vae] reusing {out}", flush=True)
        return out
    seed_everything(seed)
    pixels, _ = load_dataset(work)
    data = to_tensor(pixels)
    vae = make_vae()
    vae.train()
    opt = torch.optim.AdamW(vae.parameters(), lr=VAE_LR, weight_decay=0.0)
    order = torch.Generator().manual_seed(seed)
    start = time.time()
    for step in range(1, steps + 1):
        # Cosine decay with a short warm-up: the tiny decoder sharpens edges late in training.
        warm = min(1.0, step / 100)
        lr = VAE_LR * warm * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * step / steps)))
        for group in opt.param_groups:
            group["lr"] = lr
        idx = torch.randint(0, len(data), (VAE_BATCH,), generator=order)
        batch = data[idx]
        posterior = vae.encode(batch).latent_dist
        # Decode the posterior mean: sampling with the untrained unit variance drowns the code in noise and
        # teaches the decoder to blur; the KL term still keeps the means bounded and smooth.
        recon = vae.decode(noisy_latents(posterior.mode(), latent_noise, order)).sample
        rec_loss = F.l1_loss(recon, batch) + F.mse_loss(recon, batch)
        kl = posterior.kl().mean()  # summed over the 256 latent values, averaged over the batch
        loss = rec_loss + KL_WEIGHT * kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(vae.parameters(), 1.0)
        opt.step()
        if step % log_every == 0 or step == steps:
            elapsed = time.time() - start
            print(
                f"[vae] step {step}/{steps} rec {rec_loss.item():.4f} kl {kl.item():.3f} lr {lr:.2e} "
                f"{elapsed:.0f}s (eta {elapsed / step * (steps - step):.0f}s)",
                flush=True,
            )
    vae.eval()
    std = latent_std(vae, data[:2000])
    vae.register_to_config(scaling_factor=1.0 / std)
    vae.save_pretrained(str(out), safe_serialization=True)
    (out / "done.json").write_text(
        json.dumps({"steps": steps, "latent_std": std, "seconds": time.time() - start})
    )
    print(f"[vae] done: latent std {std:.4f} -> scaling_factor {1.0 / std:.4f}", flush=True)
    return out


@torch.no_grad()
def latent_std(vae: AutoencoderKL, images: torch.Tensor) -> float:
    """Std of the latent means, so scaled latents have unit variance as the diffusion schedule assumes."""
    means = torch.cat([vae.encode(images[i : i + 250]).latent_dist.mean for i in range(0, len(images), 250)])
    return float(means.std())


@torch.no_grad()
def encode_dataset(vae: AutoencoderKL, work: Path) -> torch.Tensor:
    """Scaled latent means of the whole dataset (N, 4, 8, 8), cached next to the VAE."""
    path = work / "latents.pt"
    if path.exists():
        return torch.load(path)
    pixels, _ = load_dataset(work)
    chunks = []
    for i in range(0, len(pixels), 500):
        chunks.append(vae.encode(to_tensor(pixels[i : i + 500])).latent_dist.mean)
    latents = torch.cat(chunks) * vae.config.scaling_factor
    torch.save(latents, path)
    return latents


def finetune_decoder(
    work: Path,
    steps: int = DECODER_STEPS,
    seed: int = 1,
    log_every: int = 100,
    latent_noise: float = DECODER_LATENT_NOISE,
) -> Path:
    """Fine-tune only the decoder on the cached latents; saves ``work/vae_ft`` (same encoder and scale)."""
    out = work / "vae_ft"
    if (out / "done.json").exists():
        print(f"[decoder] reusing {out}", flush=True)
        return out
    seed_everything(seed)
    vae = AutoencoderKL.from_pretrained(str(work / "vae"))
    latents = encode_dataset(vae.eval(), work) / vae.config.scaling_factor
    pixels, _ = load_dataset(work)
    params = list(vae.decoder.parameters()) + list(vae.post_quant_conv.parameters())
    opt = torch.optim.AdamW(params, lr=DECODER_LR, weight_decay=0.0)
    vae.decoder.train()
    order = torch.Generator().manual_seed(seed)
    start = time.time()
    for step in range(1, steps + 1):
        lr = DECODER_LR * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * step / steps)))
        for group in opt.param_groups:
            group["lr"] = lr
        idx = torch.randint(0, len(latents), (VAE_BATCH,), generator=order)
        target = to_tensor(pixels[idx.numpy()])
        recon = vae.decode(noisy_latents(latents[idx], latent_noise, order)).sample
        loss = F.l1_loss(recon, target) + F.mse_loss(recon, target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if step % log_every == 0 or step == steps:
            elapsed = time.time() - start
            print(
                f"[decoder] step {step}/{steps} rec {loss.item():.4f} lr {lr:.2e} {elapsed:.0f}s "
                f"(eta {elapsed / step * (steps - step):.0f}s)",
                flush=True,
            )
    vae.eval().save_pretrained(str(out), safe_serialization=True)
    (out / "done.json").write_text(json.dumps({"steps": steps, "seconds": time.time() - start}))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/shapes-work"))
    parser.add_argument("--steps", type=int, default=VAE_STEPS)
    parser.add_argument("--decoder-steps", type=int, default=DECODER_STEPS)
    parser.add_argument("--threads", type=int, default=2, help="1 is faster on a CPU shared with other jobs")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    train_vae(args.work, steps=args.steps)
    finetune_decoder(args.work, steps=args.decoder_steps)


if __name__ == "__main__":
    main()
