"""Working memory of one Qwen-Image transformer call, declared as facts.

Lives here: `qwenimage_activations`, `qwenimage_working_bytes`, `qwenimage_working`. May import: stdlib,
torch, memory, pipelines.diffusion.values.

Qwen-Image's transformer is a dual-stream MMDiT (60 blocks at full size): image and text tokens keep their
own residual streams, norms and MLPs and meet only in joint attention. The peak is inside one block, while
the image stream's MLP runs: its residual, modulated input, q/k/v, attention output and the 4x MLP
projection with its GELU stay alive together (16 x hidden a token), beside the text stream's state, which is
past its own attention by then (6 x hidden a token). Measured on the full-width transformer on the meta
device (tests/test_family_qwenimage.py) from 512 to 1536 px and 50 to 512 caption tokens: 1.06-1.08x the
live tensors. True CFG calls the transformer once per prompt, so guidance never doubles a call's batch.
Qwen-Image-Edit's reference pictures are more image-stream tokens; 2511's `zero_cond_t` adds a per-token
modulation (2 x hidden a token): 1.07-1.08x with one to three references, both ways (meta device,
tests/test_family_qwenimage_edit.py).
"""

from __future__ import annotations

from memory import Working
from memory.estimates import Activations, activation_bytes
from pipelines.diffusion.values import DenoiserRef


def qwenimage_activations(
    hidden: int, image_tokens: int, text_tokens: int, zero_cond_t: bool = False
) -> list[Activations]:
    terms = [
        Activations(
            "image stream: residual, q/k/v, attention out, 4x MLP and its GELU", 16, hidden, image_tokens
        ),
        Activations("text stream past its attention", 6, hidden, text_tokens),
    ]
    if zero_cond_t:  # Edit 2511: each token's shift and scale picked from two timesteps' modulations
        terms.append(Activations("per-token modulation (zero_cond_t)", 2, hidden, image_tokens))
    return terms


def qwenimage_working_bytes(
    denoiser: DenoiserRef, h: int, w: int, batch: int, text_tokens: int, reference_tokens: int = 0
) -> int:
    """Bytes of one call on a (batch, C, h, w) latent (latent pixels) with `text_tokens` caption tokens and
    `reference_tokens` of edit pictures' packed latents, which join the image stream (Qwen-Image-Edit)."""
    config = denoiser.config
    hidden = int(config.get("num_attention_heads", 24)) * int(config.get("attention_head_dim", 128))
    # The pipeline packs 2x2 latent patches into one token whatever the config says (`_pack_latents`).
    image_tokens = (h // 2) * (w // 2) + reference_tokens
    terms = qwenimage_activations(hidden, image_tokens, text_tokens, bool(config.get("zero_cond_t", False)))
    large = activation_bytes(terms, batch=batch, dtype=denoiser.dtype)
    return large + large // 64  # the small tensors beside them, as in `diffusion_working_bytes`


def qwenimage_working(
    denoiser: DenoiserRef, h: int, w: int, batch: int, text_tokens: int, reference_tokens: int = 0
) -> Working:
    """The formula plus the shape it depends on (the manager replaces it by the measured peak)."""
    formula = qwenimage_working_bytes(denoiser, h, w, batch, text_tokens, reference_tokens)
    shape = f"{batch}x{h}x{w}+{text_tokens}t" + (f"+{reference_tokens}r" if reference_tokens else "")
    return Working(formula, shape)
