"""One-command training of the tiny shapes text-to-image model, exported as a diffusers SD folder.

Runs every stage with progress output and fixed seeds: render the synthetic dataset and train the VAE
(``train_vae``), train text encoder + UNet on cached latents in rounds (``train_unet``), fine-tune the VAE
decoder with the encoder frozen (``train_vae.finetune_decoder``: sharper pictures, same latents), then
assemble a standard ``StableDiffusionPipeline`` folder (fp16 safetensors, DPM++ 2M scheduler carrying the
training betas) and optionally evaluate it (``evaluate``). Stage outputs are cached in ``--work`` so an
interrupted run resumes.

    python -m training.shapes.train --out resources/models/shapes-sd [--work /tmp/shapes-work]

May import only torch, diffusers, transformers and this package (never ``nodes``/``app``/Qt).
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import torch
from diffusers import (
    AutoencoderKL,
    DPMSolverMultistepScheduler,
    StableDiffusionPipeline,
    UNet2DConditionModel,
)
from transformers import CLIPTextModel, CLIPTokenizer

from training.shapes.train_unet import (
    BETA_END,
    BETA_START,
    PREDICTION_TYPE,
    TRAIN_TIMESTEPS,
    UNET_ROUNDS,
    train_rounds,
)
from training.shapes.train_vae import (
    DECODER_STEPS,
    LATENT_NOISE,
    VAE_STEPS,
    finetune_decoder,
    train_vae,
)

# Files in the export folder that training writes; anything else there (README.md, eval.json,
# contact_sheet.png) is left alone so re-exporting does not delete the model card.
COMPONENTS = ("scheduler", "text_encoder", "tokenizer", "unet", "vae")


def make_sampling_scheduler() -> DPMSolverMultistepScheduler:
    """DPM++ 2M over exactly the betas the UNet was trained with."""
    return DPMSolverMultistepScheduler(
        num_train_timesteps=TRAIN_TIMESTEPS,
        beta_start=BETA_START,
        beta_end=BETA_END,
        beta_schedule="linear",
        prediction_type=PREDICTION_TYPE,
        algorithm_type="dpmsolver++",
        solver_order=2,
        # StableDiffusionPipeline rewrites (and warns about) any other value; irrelevant with linspace.
        steps_offset=1,
    )


def export_pipeline(work: Path, out: Path, stage: Path, checkpoint: bool = False) -> Path:
    """Assemble the trained parts, with ``stage``'s text encoder and UNet, into ``out`` as an fp16
    StableDiffusionPipeline folder.

    ``checkpoint`` exports the last periodic EMA snapshot of an unfinished UNet round instead.
    """
    weights = stage / "checkpoint" if checkpoint else stage
    vae_dir = work / "vae_ft" if (work / "vae_ft" / "done.json").exists() else work / "vae"
    vae = AutoencoderKL.from_pretrained(str(vae_dir), dtype=torch.float32)
    unet = UNet2DConditionModel.from_pretrained(str(weights / "unet"), dtype=torch.float32)
    text_encoder = CLIPTextModel.from_pretrained(str(weights / "text_encoder"), dtype=torch.float32)
    tokenizer = CLIPTokenizer.from_pretrained(str(stage / "tokenizer"))
    pipe = StableDiffusionPipeline(
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        unet=unet,
        scheduler=make_sampling_scheduler(),
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    for name in COMPONENTS:
        shutil.rmtree(out / name, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    # Plain file names (no variant) holding fp16 tensors: half the size, and from_pretrained upcasts on load.
    pipe.to(torch.float16)
    pipe.save_pretrained(str(out), safe_serialization=True)
    # CLIP-format vocab/merges next to tokenizer.json so older transformers can load the tokenizer too.
    for name in ("vocab.json", "merges.txt"):
        if (stage / "tokenizer" / name).exists():
            shutil.copy(stage / "tokenizer" / name, out / "tokenizer" / name)
    return out


def folder_size_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("resources/models/shapes-sd"))
    parser.add_argument("--work", type=Path, default=Path("/tmp/shapes-work"))
    parser.add_argument("--vae-steps", type=int, default=VAE_STEPS)
    parser.add_argument(
        "--unet-rounds",
        type=int,
        default=len(UNET_ROUNDS),
        help=f"how many of the {len(UNET_ROUNDS)} UNet rounds to run (steps, peak lr): {list(UNET_ROUNDS)}",
    )
    parser.add_argument("--decoder-steps", type=int, default=DECODER_STEPS)
    parser.add_argument(
        "--latent-noise",
        type=float,
        default=LATENT_NOISE,
        help="VAE training: noise added to latents, as a fraction of their std",
    )
    # One thread avoids OpenMP barrier stalls when other jobs share the cores (the shipped run used 1).
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-eval", action="store_true", help="skip the held-out evaluation at the end")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    start = time.time()
    print(f"[train] stage 1/4: dataset + VAE ({args.vae_steps} steps) in {args.work}", flush=True)
    train_vae(args.work, steps=args.vae_steps, latent_noise=args.latent_noise)
    rounds = UNET_ROUNDS[: args.unet_rounds]
    print(f"[train] stage 2/4: text encoder + UNet, {len(rounds)} rounds {list(rounds)}", flush=True)
    stage = train_rounds(args.work, rounds)
    print(f"[train] stage 3/4: decoder fine-tune ({args.decoder_steps} steps, encoder frozen)", flush=True)
    finetune_decoder(args.work, steps=args.decoder_steps)
    print(f"[train] stage 4/4: export to {args.out}", flush=True)
    export_pipeline(args.work, args.out, stage)
    print(f"[train] exported {folder_size_mb(args.out):.1f} MB in {time.time() - start:.0f}s", flush=True)
    if not args.no_eval:
        from training.shapes.evaluate import evaluate

        evaluate(args.out)


if __name__ == "__main__":
    main()
