"""Diffusion pipelines split into nodes: loaders, prompt encoding, our denoising loop, VAE, demo models.

May import: stdlib, torch, diffusers, transformers, tokenizers, safetensors, PIL, memory, pipelines.paths.
Never nodes/, app/ or Qt. Nothing happens at import beyond importing diffusers/transformers.

Modules, by concept:
  families      what differs between SD1.x/2.x, SDXL, PixArt-Sigma, SD3 and Flux (data, not branches)
  values        the values on wires: DenoiserRef, TextEncoderRef, VaeRef, Conditioning, Latents
  loading       diffusers folders and separate component files -> lazy memory-manager handles
  single_file   original-format .safetensors checkpoints (SD1.x, SDXL), offline with shipped configs
  export        the inverse: write SD1.x / SDXL as an original-format single file
  conditioning  encode_prompt per family (mirrors the diffusers pipelines)
  schedulers    sampler names -> diffusers scheduler classes
  sampling      the denoising loop with per-step callbacks (DDPM-style: SD, SDXL, PixArt)
  flow_sampling the flow-matching loops (Flux, SD3)
  vae           decode / encode between latents and IMAGE tensors
  previews      latent -> RGB preview images
  demo_models   tiny random-weight models built offline (demo:tiny-sd, tiny-sdxl, tiny-pixart, tiny-sd3,
                tiny-flux)
"""

from pipelines.diffusion.conditioning import encode_prompt
from pipelines.diffusion.demo_models import DEMO_MODELS, ensure_demo_model, make_all_demo_models
from pipelines.diffusion.families import FAMILIES, Family, UnsupportedModelError
from pipelines.diffusion.loading import LoadedModel, load_model
from pipelines.diffusion.sampling import SamplerSettings, StepInfo, sample
from pipelines.diffusion.schedulers import SCHEDULER_NAMES
from pipelines.diffusion.vae import decode, encode
from pipelines.diffusion.values import Conditioning, DenoiserRef, Latents, TextEncoderRef, VaeRef

__all__ = [
    "DEMO_MODELS",
    "FAMILIES",
    "SCHEDULER_NAMES",
    "Conditioning",
    "DenoiserRef",
    "Family",
    "Latents",
    "LoadedModel",
    "SamplerSettings",
    "StepInfo",
    "TextEncoderRef",
    "UnsupportedModelError",
    "VaeRef",
    "decode",
    "encode",
    "encode_prompt",
    "ensure_demo_model",
    "load_model",
    "make_all_demo_models",
    "sample",
]
