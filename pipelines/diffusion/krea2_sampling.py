"""The Krea 2 denoising loop, written out like diffusers' `Krea2Pipeline.__call__`, and its working memory.

Lives here: `sample_krea2`, `krea2_working_bytes`, `krea2_activations`, `text_fusion_activations`,
`position_ids`, `prompt_references`, `KREA2_DISTILLED_MU`. May import: stdlib,
numpy, torch, diffusers, memory, pipelines.steps, pipelines.diffusion.*.

What differs from the other flow-matching loops: the latents are packed into 2x2 patches (as Flux's), the
text and image tokens share one single-stream transformer whose rotary positions put the text at the
origin and each image token at its (0, h, w) grid cell, and the prompt is a fixed-length block with its mask.
Guidance is `pos + cfg * (pos - neg)` (the pipeline's rule: it guides whenever cfg > 0, with "" as the
negative when none is given; ours is the wired negative's text), one call per prompt. The Turbo folder
(`is_distilled` in model_index.json) uses a fixed shift (mu 1.15); the base one computes it from the image's
token count. `sampler.cfg` is the pipeline's `guidance_scale`; 0 is no guidance. A positive prompt with
reference latents and a reference method (ComfyUI's style-reference template) has them appended after the
image's tokens as ComfyUI's model places them (pipelines.diffusion.krea2_refs); the negative reads its own.
"""

from __future__ import annotations

import numpy as np
import torch
from diffusers import FlowMatchEulerDiscreteScheduler
from diffusers.utils.torch_utils import randn_tensor

from memory import MemoryManager, Working
from memory.estimates import Activations, activation_bytes
from pipelines.diffusion.flow_loop import StepReport, check_flow_inputs
from pipelines.diffusion.flow_sampling import config_shift, pack_latents, start_partway, unpack_latents
from pipelines.diffusion.flux2_sampling import is_distilled
from pipelines.diffusion.krea2_refs import REFERENCE_METHODS, TIMESTEP_ZERO, krea2_forward, reference_tokens
from pipelines.diffusion.lora import use_denoiser
from pipelines.diffusion.sampling import SamplerSettings, batched_conditioning
from pipelines.diffusion.schedulers import make_scheduler
from pipelines.diffusion.step_cache import step_cache
from pipelines.diffusion.values import Conditioning, DenoiserRef, Latents
from pipelines.steps import OnStep

KREA2_DISTILLED_MU = 1.15  # the pipeline's fixed timestep shift for the distilled (Turbo) checkpoint


def position_ids(text_tokens: int, grid_h: int, grid_w: int, device: torch.device | str) -> torch.Tensor:
    """`Krea2Pipeline.prepare_position_ids`: (text + image tokens, 3); text rows zero, image rows (0, h, w)."""
    text_ids = torch.zeros(text_tokens, 3, device=device)
    image_ids = torch.zeros(grid_h, grid_w, 3, device=device)
    image_ids[..., 1] = torch.arange(grid_h, device=device)[:, None]
    image_ids[..., 2] = torch.arange(grid_w, device=device)[None, :]
    return torch.cat([text_ids, image_ids.reshape(grid_h * grid_w, 3)], dim=0)


def krea2_activations(
    config: dict, image_tokens: int, text_tokens: int, per_token_modulation: bool = False
) -> list[Activations]:
    """The blocks' peak: inside a single-stream block, over text and image tokens together (reference tokens
    count as image tokens), the residual, modulated input, q, attention out, the grouped k/v and the SwiGLU
    MLP (gate, up, product) are alive, beside the text stream as it entered the blocks (fused and projected:
    2 x hidden a text token). Timestep-zero references add a per-token modulation: the 6 x hidden vector each
    token takes and the block's copy of it with its table added."""
    head_dim = int(config.get("attention_head_dim", 128))
    hidden = int(config.get("num_attention_heads", 48)) * head_dim
    kv = int(config.get("num_key_value_heads", 12)) * head_dim
    tokens = image_tokens + text_tokens
    terms = [
        Activations("residual, modulated input, q, attention out", 4, hidden, tokens),
        Activations("grouped k and v", 2, kv, tokens),
        Activations("SwiGLU: gate, up, product", 3, int(config.get("intermediate_size", 16384)), tokens),
        Activations("the text stream entering the blocks", 2, hidden, text_tokens),
    ]
    if per_token_modulation:
        terms.append(Activations("per-token modulation and the block's copy", 2 * 6, hidden, tokens))
    return terms


def text_fusion_activations(config: dict, text_tokens: int) -> list[Activations]:
    """The text fusion's peak, before the blocks: its layer-wise blocks run over every tap of every text
    token (text tokens x taps positions of the encoder's width) with the same block shape."""
    positions = text_tokens * int(config.get("num_text_layers", 12))
    width = int(config.get("text_hidden_dim", 2560))
    return [
        Activations("fusion: residual, q/k/v, attention out", 4, width, positions),
        Activations(
            "fusion SwiGLU: gate, up, product", 3, int(config.get("text_intermediate_size", 6912)), positions
        ),
    ]


def krea2_working_bytes(
    denoiser: DenoiserRef,
    h: int,
    w: int,
    batch: int,
    text_tokens: int,
    reference_tokens: int = 0,
    per_token_modulation: bool = False,
) -> int:
    """Bytes of one call on a (batch, C, h, w) latent (latent pixels) with a `text_tokens` prompt block (and
    `reference_tokens` appended): the larger of the text fusion's peak and the blocks' (one after the other).
    Measured on the full-width transformer on the meta device (tests/test_family_krea2.py): 1.01-1.04x
    without references."""
    config = denoiser.config
    image_tokens = (h // 2) * (w // 2) + reference_tokens
    blocks = activation_bytes(
        krea2_activations(config, image_tokens, text_tokens, per_token_modulation),
        batch=batch,
        dtype=denoiser.dtype,
    )
    fusion = activation_bytes(text_fusion_activations(config, text_tokens), batch=batch, dtype=denoiser.dtype)
    large = max(blocks, fusion)
    return large + large // 64  # the small tensors beside them, as in `diffusion_working_bytes`


def prompt_references(prompt: Conditioning) -> tuple[list[torch.Tensor], str | None]:
    """A prompt's reference latents and method, as ComfyUI's Krea 2 reads them: none without a method (its
    model has no default placement)."""
    method = prompt.reference_method
    if not prompt.references or method is None:
        return [], None
    if method not in REFERENCE_METHODS:
        raise ValueError(f"reference method {method!r}: Krea 2 takes one of {', '.join(REFERENCE_METHODS)}")
    return [ref.samples for ref in prompt.references], method


@torch.no_grad()
def sample_krea2(
    mm: MemoryManager,
    denoiser: DenoiserRef,
    positive: Conditioning,
    negative: Conditioning | None,
    latents: Latents,
    settings: SamplerSettings,
    *,
    on_step: OnStep | None = None,
) -> Latents:
    # 1. Check inputs
    title = denoiser.family.title
    in_channels = denoiser.config.get("in_channels")
    wanted = None if in_channels is None else int(in_channels) // 4  # the transformer takes 2x2 patches
    check_flow_inputs(denoiser, latents, settings, channels=wanted, img2img=False)
    device = mm.device
    batch, channels, h, w = latents.samples.shape
    do_cfg = settings.cfg > 0 and negative is not None  # the pipeline's `guidance_scale > 0`
    generator = torch.Generator("cpu").manual_seed(settings.seed)
    dtype = denoiser.dtype

    # 2. Prepare latent variables: noise as the pipeline draws it, (B, C, h, w), then packed
    noise = randn_tensor(
        (batch, channels, h, w), generator=generator, device=torch.device(device), dtype=dtype
    )
    x = pack_latents(noise)

    # 3. Prepare timesteps: sigmas 1 -> 1/steps; a fixed shift for Turbo, else from the token count. A ComfyUI
    # file's Turbo flag travels in its scheduler settings (comfy_layouts.krea2), a folder's in model_index.json.
    scheduler_config = {k: v for k, v in denoiser.scheduler_config.items() if k != "is_distilled"}
    if settings.scheduler == "default":
        scheduler = make_scheduler("default", scheduler_config)
    else:
        scheduler = FlowMatchEulerDiscreteScheduler.from_config(scheduler_config)
    config = scheduler.config
    if is_distilled(denoiser) or denoiser.scheduler_config.get("is_distilled"):
        mu = KREA2_DISTILLED_MU
    else:
        mu = config_shift(config, x.shape[1], max_image_seq_len=6400)
    scheduler.set_timesteps(sigmas=np.linspace(1.0, 1 / settings.steps, settings.steps), device=device, mu=mu)
    timesteps = start_partway(scheduler, settings)

    # 4. Prepare conditioning: the prompt block with its mask, the rotary positions
    pos = batched_conditioning(positive, batch)
    neg = batched_conditioning(negative, batch) if do_cfg and negative is not None else None
    if neg is not None and neg.embeds.shape[1] != pos.embeds.shape[1]:
        raise ValueError(
            f"{title}: the two prompts' blocks differ in length ({pos.embeds.shape[1]} vs {neg.embeds.shape[1]})"
        )
    text_tokens = pos.embeds.shape[1]
    ids = position_ids(text_tokens, h // 2, w // 2, device)

    def placement(prompt: Conditioning) -> tuple[torch.Tensor, torch.Tensor, bool] | None:
        """A prompt's reference tokens, the positions with theirs appended, and whether at timestep zero
        (each prompt its own, as ComfyUI conditions each model call on its prompt's references)."""
        refs, method = prompt_references(prompt)
        if not refs:
            return None
        tokens, ref_ids = reference_tokens(refs, batch, device, dtype)
        return tokens, torch.cat([ids, ref_ids], dim=0), method == TIMESTEP_ZERO

    placed = {"cond": placement(positive), "uncond": placement(negative) if neg is not None else None}
    referenced = [p for p in placed.values() if p is not None]
    if referenced and settings.step_cache.on and settings.step_cache.method == "easy":
        raise ValueError(f"{title}: cache 'easy' does not run with reference pictures; set cache to off")

    def predict(
        model: torch.nn.Module, cond: Conditioning, timestep: torch.Tensor, branch: str
    ) -> torch.Tensor:
        mask = cond.attention_mask
        refs = placed[branch]
        if refs is not None:
            tokens, all_ids, zero = refs
            return krea2_forward(
                model,
                x,
                tokens,
                cond.embeds.to(device=device, dtype=dtype),
                timestep,
                all_ids,
                None if mask is None else mask.to(device),
                timestep_zero=zero,
            )
        return model(
            hidden_states=x,
            encoder_hidden_states=cond.embeds.to(device=device, dtype=dtype),
            timestep=timestep,
            position_ids=ids,
            encoder_attention_mask=None if mask is None else mask.to(device),
            return_dict=False,
        )[0]

    # 5. Denoising loop
    extra = max((tokens.shape[1] for tokens, _, _ in referenced), default=0)
    zero = any(z for _, _, z in referenced)
    working = Working(
        krea2_working_bytes(denoiser, h, w, batch, text_tokens, extra, zero),
        f"{batch}x{h}x{w}+{text_tokens}t+{extra}r",
    )
    report = StepReport(on_step, len(timesteps), scheduler, unpack=lambda z: unpack_latents(z, h, w))
    with (
        use_denoiser(mm, denoiser, working=working) as model,
        step_cache(model, settings.step_cache, len(timesteps)) as cache,
    ):
        for i, t in enumerate(timesteps):
            cache.step(i)
            timestep = (t / config.num_train_timesteps).expand(batch).to(x.dtype)
            with cache.branch("cond"):
                noise_pred = predict(model, pos, timestep, "cond")
            if neg is not None:
                with cache.branch("uncond"):
                    neg_pred = predict(model, neg, timestep, "uncond")
                noise_pred = noise_pred + settings.cfg * (noise_pred - neg_pred)

            before = x
            x = scheduler.step(noise_pred, t, x, return_dict=False)[0]
            report(i, t, before, x, noise_pred)

    return Latents(
        samples=unpack_latents(x, h, w).cpu(), vae_scale_factor=latents.vae_scale_factor, source="sampled"
    )
