"""The tiny Flux split set: a transformer-only file, CLIP-L and T5 files and a VAE file, as releases ship them.

Lives here: `SPLIT_DEMO`, `ensure_split_demo`, `write_split_set`, `resolve_split_path`; run as
`python -m pipelines.quant.demo_split [OUT]`. May import: stdlib, torch, safetensors, diffusers,
pipelines.paths, pipelines.diffusion, pipelines.quant.

Made from the `demo:tiny-flux` diffusers folder (random weights, fixed seed), so the split set and the folder
are the same model and can be compared bit for bit. Layouts follow the public files:
- `flux1-tiny.safetensors`: Black Forest Labs' transformer layout (`double_blocks.*`, as flux1-dev.safetensors),
  and `flux1-tiny-fp8_e4m3fn.safetensors`, the same in float8 (as the fp8 releases; norms and biases kept);
- `clip_l.safetensors`: transformers' CLIPTextModel with the `text_model.` prefix (as ComfyUI's clip_l);
- `t5xxl.safetensors`: transformers' T5EncoderModel (`encoder.block.*`, `shared.weight`);
- `ae.safetensors`: the original autoencoder layout without prefix (`encoder.down.0.block.0.*`, as ae.safetensors);
- `flux1-tiny-Q8_0.gguf`, `flux1-tiny-Q4_0.gguf`: the transformer in GGUF (BFL names, as city96's files);
- `config/`: the config-only diffusers folder with the tiny configs and tokenizers (what `config_dir` points at).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from safetensors.torch import save_file

from pipelines.paths import demo_models_dir, resolve_model_path

SPLIT_DEMO = "tiny-flux-split"
FILES = ("flux1-tiny.safetensors", "clip_l.safetensors", "t5xxl.safetensors", "ae.safetensors")


def _fp8_like_release(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    # fp8 releases cast the matrices and keep 1-D tensors (norm scales, biases) in 16/32 bits.
    return {k: v.to(torch.float8_e4m3fn) if v.ndim >= 2 else v for k, v in state.items()}


def write_split_set(folder: Path, out: Path) -> None:
    """Write the split files of the diffusers Flux `folder` into `out`."""
    from diffusers import AutoencoderKL, FluxTransformer2DModel
    from transformers import CLIPTextModel, T5EncoderModel

    from pipelines.diffusion.export import vae_to_original
    from pipelines.quant.gguf_files import write_gguf_denoiser
    from pipelines.quant.layouts import flux_diffusers_to_bfl

    out.mkdir(parents=True, exist_ok=True)
    transformer = FluxTransformer2DModel.from_pretrained(folder, subfolder="transformer")
    bfl = flux_diffusers_to_bfl(transformer.state_dict())
    save_file(bfl, str(out / "flux1-tiny.safetensors"))
    save_file(_fp8_like_release(bfl), str(out / "flux1-tiny-fp8_e4m3fn.safetensors"))
    for qtype in ("Q8_0", "Q4_0"):
        write_gguf_denoiser(bfl, out / f"flux1-tiny-{qtype}.gguf", qtype, arch="flux")
    clip = CLIPTextModel.from_pretrained(folder, subfolder="text_encoder")
    state = {"text_model." + k.removeprefix("text_model."): v for k, v in clip.state_dict().items()}
    save_file({k: v.contiguous() for k, v in state.items()}, str(out / "clip_l.safetensors"))
    t5 = T5EncoderModel.from_pretrained(folder, subfolder="text_encoder_2")
    t5_state = {k: v.contiguous() for k, v in t5.state_dict().items()}
    t5_state.pop("encoder.embed_tokens.weight", None)  # tied to shared.weight: stored once, as releases do
    save_file(t5_state, str(out / "t5xxl.safetensors"))
    vae = AutoencoderKL.from_pretrained(folder, subfolder="vae")
    ldm = vae_to_original(vae.state_dict(), dict(vae.config))
    save_file(
        {k.removeprefix("first_stage_model."): v.contiguous() for k, v in ldm.items()},
        str(out / "ae.safetensors"),
    )
    config = out / "config"
    shutil.copytree(
        folder, config, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"), dirs_exist_ok=True
    )


def ensure_split_demo(root: Path | None = None) -> Path:
    """The split demo folder, written first (atomically) when missing."""
    root = root or demo_models_dir()
    out = root / SPLIT_DEMO
    if (out / "config" / "model_index.json").exists():
        return out
    from pipelines.diffusion.demo_models import ensure_demo_model  # after the check: it imports diffusers

    folder = ensure_demo_model("tiny-flux", root)
    tmp = Path(tempfile.mkdtemp(prefix=f".{SPLIT_DEMO}-", dir=root))
    try:
        write_split_set(folder, tmp)
        os.replace(tmp, out)
    except OSError:
        if not (out / "config" / "model_index.json").exists():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def resolve_split_path(spec: str) -> Path:
    """`resolve_model_path`, building the split demo first for `demo:tiny-flux-split/...` references."""
    if spec.startswith(f"demo:{SPLIT_DEMO}"):
        ensure_split_demo()
    return resolve_model_path(spec)


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else None
    print(ensure_split_demo(target))
