"""Stage 2 of the shapes model: train the CLIP text encoder and the UNet together on cached latents.

Holds the text-encoder and UNet architectures, the DDPM noise schedule used in training (linear betas
1e-4..0.02, 1000 steps), and the v-prediction loop (min-SNR-5 weighting, AdamW, EMA weights, 10%
empty-caption dropout so classifier-free guidance works at sampling time).

May import only torch, diffusers, transformers, numpy and this package (never ``nodes``/``app``/Qt).
Run alone with ``python -m training.shapes.train_unet --work DIR`` after ``train_vae``.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import shutil
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from diffusers import AutoencoderKL, DDPMScheduler, UNet2DConditionModel
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

from training.shapes.tokenizer import build_clip_tokenizer, check_tokenizer
from training.shapes.train_vae import encode_dataset, load_dataset, seed_everything

# (steps, peak lr) per round. Each round after the first restarts a cosine schedule from the previous
# round's EMA weights: shape outlines are the last thing learnt, and every restart at a lower peak kept
# sharpening them after colours, sizes and places had settled.
UNET_ROUNDS: tuple[tuple[int, float], ...] = ((3_400, 8e-4), (5_000, 3e-4), (4_000, 2e-4), (4_000, 1.5e-4))
UNET_STEPS, LR = UNET_ROUNDS[0]
BATCH = 32
EMA_DECAY = 0.998
CAPTION_DROPOUT = 0.10
MIN_SNR_GAMMA = 5.0
TRAIN_TIMESTEPS = 1000
CHECKPOINT_EVERY = 500
BETA_START, BETA_END = 1e-4, 0.02
# Not epsilon: on 8x8x4 latents this schedule leaves almost no signal at most timesteps (sigma/alpha up to
# ~158), so an epsilon model must return its input almost exactly and each small error is multiplied by
# sigma/alpha in the denoised estimate; in practice samples blew up and ignored the prompt. A v-model
# predicts ~ -x0 at high noise, so the prompt sets the colours directly and nothing is amplified.
PREDICTION_TYPE = "v_prediction"


def make_noise_scheduler() -> DDPMScheduler:
    return DDPMScheduler(
        num_train_timesteps=TRAIN_TIMESTEPS,
        beta_start=BETA_START,
        beta_end=BETA_END,
        beta_schedule="linear",
        prediction_type=PREDICTION_TYPE,
    )


def make_text_encoder(tokenizer: CLIPTokenizer) -> CLIPTextModel:
    """Hidden 64, 2 layers (~0.14M params); positions cover exactly the tokenizer's padded length."""
    config = CLIPTextConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=tokenizer.model_max_length,
        projection_dim=64,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return CLIPTextModel(config)


# Width goes where the shapes are drawn: the 8x8 level. The first recipe's (32, 64, 128) put most of its
# 4.2M parameters at 2x2, where there is no outline to draw, and learnt colours and places but blobs; the
# same parameter count as (64, 96, 96) raised held-out shape class after round 1 from 41% to 62%.
UNET_CHANNELS = (64, 96, 96)


def make_unet() -> UNet2DConditionModel:
    """Channels ``UNET_CHANNELS``, cross-attention in every block, 8x8x4 latents (~4.3M params)."""
    levels = len(UNET_CHANNELS)
    return UNet2DConditionModel(
        sample_size=8,
        in_channels=4,
        out_channels=4,
        block_out_channels=UNET_CHANNELS,
        down_block_types=("CrossAttnDownBlock2D",) * levels,
        up_block_types=("CrossAttnUpBlock2D",) * levels,
        layers_per_block=1,
        cross_attention_dim=64,
        # diffusers' legacy name: this is the number of heads.
        attention_head_dim=4,
        norm_num_groups=32,
    )


def tokenize(tokenizer: CLIPTokenizer, texts: list[str]) -> torch.Tensor:
    """Padded ids exactly as StableDiffusionPipeline.encode_prompt builds them."""
    return tokenizer(
        texts,
        padding="max_length",
        max_length=tokenizer.model_max_length,
        truncation=True,
        return_tensors="pt",
    ).input_ids


def train_unet(
    work: Path,
    steps: int = UNET_STEPS,
    seed: int = 0,
    log_every: int = 100,
    init: Path | None = None,
    out_name: str = "unet_stage",
    lr_max: float = LR,
) -> Path:
    """Train text encoder + UNet on the VAE's latents; saves EMA weights to ``work/<out_name>``.

    ``init`` continues from an earlier round's EMA weights (a later, lower-lr round) instead of from scratch.
    """
    out = work / out_name
    if (out / "done.json").exists():
        print(f"[unet] reusing {out}", flush=True)
        return out
    seed_everything(seed)
    vae = AutoencoderKL.from_pretrained(str(work / "vae")).eval()
    latents = encode_dataset(vae, work)
    _, captions = load_dataset(work)
    if init is not None:
        # Keep the ids the init text encoder learnt: BPE training breaks merge ties differently run to run.
        shutil.copytree(init / "tokenizer", out / "tokenizer", dirs_exist_ok=True)
        tokenizer = CLIPTokenizer.from_pretrained(str(out / "tokenizer"))
    else:
        tokenizer = build_clip_tokenizer(out / "tokenizer")
    check_tokenizer(tokenizer)
    ids = tokenize(tokenizer, captions)
    empty_ids = tokenize(tokenizer, [""])[0]

    if init is None:
        text_encoder, unet = make_text_encoder(tokenizer), make_unet()
    else:
        text_encoder = CLIPTextModel.from_pretrained(str(init / "text_encoder"), dtype=torch.float32)
        unet = UNet2DConditionModel.from_pretrained(str(init / "unet"), dtype=torch.float32)
    text_encoder.train()
    unet.train()
    ema_text, ema_unet = copy.deepcopy(text_encoder).eval(), copy.deepcopy(unet).eval()
    params = list(text_encoder.parameters()) + list(unet.parameters())
    ema_params = list(ema_text.parameters()) + list(ema_unet.parameters())
    opt = torch.optim.AdamW(params, lr=lr_max, weight_decay=1e-2)
    noise_scheduler = make_noise_scheduler()
    alphas_cumprod = noise_scheduler.alphas_cumprod
    snr_all = alphas_cumprod / (1 - alphas_cumprod)
    order = torch.Generator().manual_seed(seed)
    print(
        f"[unet] {len(latents)} latents, text encoder {sum(p.numel() for p in text_encoder.parameters())} "
        f"params, unet {sum(p.numel() for p in unet.parameters())} params",
        flush=True,
    )

    start = time.time()
    perm = torch.randperm(len(latents), generator=order)
    cursor = 0
    for step in range(1, steps + 1):
        warm = min(1.0, step / 200)
        lr = lr_max * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps)))
        for group in opt.param_groups:
            group["lr"] = lr
        if cursor + BATCH > len(perm):
            perm, cursor = torch.randperm(len(latents), generator=order), 0
        idx = perm[cursor : cursor + BATCH]
        cursor += BATCH
        x0 = latents[idx]
        batch_ids = ids[idx].clone()
        drop = torch.rand(BATCH, generator=order) < CAPTION_DROPOUT
        batch_ids[drop] = empty_ids
        noise = torch.randn(x0.shape, generator=order)
        t = torch.randint(0, TRAIN_TIMESTEPS, (BATCH,), generator=order)
        noisy = noise_scheduler.add_noise(x0, noise, t)
        cond = text_encoder(batch_ids)[0]
        pred = unet(noisy, t, encoder_hidden_states=cond).sample
        target = noise_scheduler.get_velocity(x0, noise, t)
        # Weight in x0 terms clamp(snr, 1, 5), converted to v terms by 1 / (snr + 1): the min-SNR-5 cap stops
        # the easy low-noise steps dominating, and the floor of 1 ("truncated SNR") keeps the high-noise steps
        # that decide layout, shape and position from being starved (plain min-SNR gave them weight ~snr,
        # and the first model learnt colours but ignored "on the left" and drew blobs).
        snr = snr_all[t]
        weight = torch.clamp(snr, min=1.0, max=MIN_SNR_GAMMA) / (snr + 1)
        loss = (weight * F.mse_loss(pred, target, reduction="none").mean(dim=(1, 2, 3))).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        decay = min(EMA_DECAY, (1 + step) / (10 + step))
        with torch.no_grad():
            torch._foreach_lerp_(ema_params, params, 1 - decay)
        if step % CHECKPOINT_EVERY == 0 and step < steps:
            # EMA snapshot, so a run cut short by a busy machine still leaves a usable model behind.
            ema_text.save_pretrained(str(out / "checkpoint" / "text_encoder"), safe_serialization=True)
            ema_unet.save_pretrained(str(out / "checkpoint" / "unet"), safe_serialization=True)
            (out / "checkpoint" / "step.txt").write_text(str(step))
        if step % log_every == 0 or step == steps:
            elapsed = time.time() - start
            print(
                f"[unet] step {step}/{steps} loss {loss.item():.4f} lr {lr:.2e} {elapsed:.0f}s "
                f"(eta {elapsed / step * (steps - step):.0f}s)",
                flush=True,
            )

    ema_text.save_pretrained(str(out / "text_encoder"), safe_serialization=True)
    ema_unet.save_pretrained(str(out / "unet"), safe_serialization=True)
    (out / "done.json").write_text(json.dumps({"steps": steps, "seconds": time.time() - start}))
    print(f"[unet] done in {time.time() - start:.0f}s", flush=True)
    return out


def round_dir_name(index: int) -> str:
    """``unet_stage`` for round 1, ``unet_stage2`` for round 2, ... (the work-dir cache layout)."""
    return "unet_stage" if index == 0 else f"unet_stage{index + 1}"


def train_rounds(work: Path, rounds: tuple[tuple[int, float], ...] = UNET_ROUNDS) -> Path:
    """Every round in turn (round ``i`` uses seed ``i``); returns the last round's folder."""
    stage: Path | None = None
    for index, (steps, lr_max) in enumerate(rounds):
        print(f"[unet] round {index + 1}/{len(rounds)}: {steps} steps, peak lr {lr_max:g}", flush=True)
        stage = train_unet(
            work, steps=steps, seed=index, init=stage, out_name=round_dir_name(index), lr_max=lr_max
        )
    assert stage is not None, "at least one round"
    return stage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/shapes-work"))
    parser.add_argument("--threads", type=int, default=2, help="1 is faster on a CPU shared with other jobs")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    train_rounds(args.work)


if __name__ == "__main__":
    main()
