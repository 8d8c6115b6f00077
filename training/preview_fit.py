"""Fit a model's cheap preview decoder: two small convolutions from latents to pixel patches.

Lives here: `fit_preview_decoder`, `main` (`python -m training.preview_fit MODEL_FOLDER`).
May import: torch, safetensors, pipelines.diffusion (loading, sampling, vae, previews), training.shapes.

The ComfyUI-style per-channel RGB factors are fitted on the SD/SDXL VAEs; a model with its own VAE (our
shapes-sd) needs its own. We sample a few prompts, keep every step's x0 prediction and its real VAE
decode, and fit two small convolutions (latent 3x3 neighbourhood -> hidden -> scale x scale RGB patch)
with an L1 loss. A least-squares linear map was tried first: 90/255 mean error on final latents. Stored as `latent_preview.safetensors` in the model folder.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from pipelines.diffusion.previews import PREVIEW_FILE, PreviewDecoder


def fit_preview_decoder(
    latents: torch.Tensor, images: torch.Tensor, scale: int, *, hidden: int = 64, iters: int = 800
) -> dict[str, torch.Tensor]:
    """latents (N, C, h, w), images (N, 3, h*scale, w*scale) in [-1, 1] -> the decoder's tensors."""
    torch.manual_seed(0)
    c = latents.shape[1]
    w1 = (torch.randn(hidden, c, 3, 3) / (c * 9) ** 0.5).requires_grad_()
    b1 = torch.zeros(hidden, requires_grad=True)
    w2 = (torch.randn(3 * scale * scale, hidden, 1, 1) / hidden**0.5).requires_grad_()
    b2 = torch.zeros(3 * scale * scale, requires_grad=True)
    params = [w1, b1, w2, b2]
    optimizer = torch.optim.Adam(params, lr=3e-3)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, iters)
    for _ in range(iters):
        decoder = PreviewDecoder(w1, b1, w2, b2, scale)
        loss = F.l1_loss(decoder(latents), images)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
    names = ("w1", "b1", "w2", "b2")
    return {n: p.detach().contiguous() for n, p in zip(names, params, strict=True)} | {
        "scale": torch.tensor(scale)
    }


def main(argv: list[str] | None = None) -> int:
    from memory import MemoryManager
    from pipelines.diffusion.conditioning import encode_prompt
    from pipelines.diffusion.denoising import sample
    from pipelines.diffusion.loading import load_model
    from pipelines.diffusion.sampling import SamplerSettings
    from pipelines.diffusion.vae import decode
    from pipelines.diffusion.values import Latents
    from training.shapes.scenes import random_caption, random_scene

    folder = Path((argv or sys.argv[1:])[0])
    rng = random.Random(0)
    mm = MemoryManager()
    try:
        model = load_model(mm, str(folder))
        scale, size = model.vae.scale_factor, model.denoiser.config["sample_size"]
        negative = encode_prompt(mm, model.text_encoder, "")
        latents: list[torch.Tensor] = []
        for seed in range(24):
            prompt = random_caption(random_scene(rng), rng)
            positive = encode_prompt(mm, model.text_encoder, prompt)
            settings = SamplerSettings(scheduler="dpmpp_2m", steps=12, cfg=4.0, seed=seed, denoise=1.0)
            empty = Latents(torch.zeros(1, model.vae.latent_channels, size, size), scale)
            sample(
                mm,
                model.denoiser,
                positive,
                negative,
                empty,
                settings,
                on_step=lambda info: latents.append(info.denoised.detach().float().clone()),
            )
        stacked = torch.cat(latents)
        images = decode(mm, model.vae, Latents(stacked, scale)).permute(0, 3, 1, 2) * 2 - 1
        tensors = fit_preview_decoder(stacked, images, scale)
    finally:
        mm.close()
    save_file(tensors, str(folder / PREVIEW_FILE))
    print(f"{folder / PREVIEW_FILE}: fitted on {len(stacked)} latents")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
