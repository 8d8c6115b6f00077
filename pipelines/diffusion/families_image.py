"""The 2026 image families' registry entries: Z-Image, Qwen-Image and Qwen-Image-Edit, Krea 2, FLUX.2 [klein]
and [dev] (flow-matching DiTs whose text encoders are LLMs), declared as data.

Lives here: `ZIMAGE`, `QWENIMAGE`, `QWENIMAGE_EDIT`, `KREA2`, `FLUX2_KLEIN`, `FLUX2_DEV`, `FLUX3`. The registry that
lists them, the detection orders and the lookups are `pipelines.diffusion.families`; this file only holds the
entries, split out so the registry stays one readable file.
May import: stdlib and pipelines.diffusion.family_types (classes are named, resolved on first use).
"""

from __future__ import annotations

from pipelines.diffusion.family_types import Family, TextEncoderSlot, _diffusers, _transformers

# Z-Image (Turbo): one Qwen3 text encoder read through its chat template, a single-stream DiT over image and
# caption tokens together, the Flux VAE (16 channels). Diffusers folders only (no single-file layout yet).
ZIMAGE = Family(
    name="zimage",
    title="Z-Image",
    pipeline_classes=("ZImagePipeline",),
    denoiser_subfolder="transformer",
    denoiser_ref=_diffusers("ZImageTransformer2DModel"),
    text_encoders=(TextEncoderSlot("text_encoder", "tokenizer", _transformers("Qwen3Model"), ("layers",)),),
    cuda_dtype_name="bfloat16",  # Z-Image-Turbo is published in bf16
    max_text_tokens=512,  # ZImagePipeline's max_sequence_length default
    latent_rgb_factors=(),  # 16 latent channels: previews show the first three
    # Streamed in execution order: the image and caption refiners, then the main single-stream layers.
    denoiser_blocks=("noise_refiner", "context_refiner", "layers"),
    flow=True,
    native_size=1024,
    size_multiple=16,  # the VAE's 8 x the transformer's 2x2 patches (a folder's configs override it)
    joint_text_tokens=512,  # caption tokens join the image tokens in every main layer (at most 512)
    prompt_encoder="qwen_chat",
    denoiser_call="zimage",
    class_marker="ZImage",
    name_markers=("z_image", "z-image", "zimage"),
)

# Qwen-Image: Qwen2.5-VL as the text encoder (the pipeline's own prompt template), a dual-stream MMDiT over
# 2x2-packed latents with true CFG, and its own 3D VAE (16 channels, one frame). Diffusers folders only.
QWENIMAGE = Family(
    name="qwenimage",
    title="Qwen-Image",
    pipeline_classes=("QwenImagePipeline",),
    denoiser_subfolder="transformer",
    denoiser_ref=_diffusers("QwenImageTransformer2DModel"),
    text_encoders=(
        TextEncoderSlot(
            "text_encoder",
            "tokenizer",
            _transformers("Qwen2_5_VLForConditionalGeneration"),
            # The language model's layers run per prompt; the vision tower's blocks never do for text, and
            # declaring them keeps them out of what stays resident.
            ("model.language_model.layers", "model.visual.blocks"),
        ),
    ),
    cuda_dtype_name="bfloat16",  # Qwen-Image is published in bf16
    max_text_tokens=512,  # QwenImagePipeline's max_sequence_length default
    latent_rgb_factors=(),  # 16 latent channels: previews show the first three
    vae_ref=_diffusers("AutoencoderKLQwenImage"),
    denoiser_blocks=("transformer_blocks",),
    flow=True,
    native_size=1024,  # the pipeline's default_sample_size 128 x 8 pixels per latent
    size_multiple=16,  # the VAE's 8 x the pipeline's 2x2 packing (a folder's configs override it)
    prompt_encoder="qwenimage",
    denoiser_call="qwenimage",
    packs_latents=True,  # the pipeline packs 2x2 latents: the config's in_channels counts packed channels
    class_marker="QwenImagePipeline",  # not QwenImageEditPipeline / QwenImage21Pipeline (other pipelines)
    name_markers=("qwen_image", "qwen-image"),
)

# Qwen-Image-Edit (the first release, 2509 and 2511 "Plus"): Qwen-Image's transformer, VAE and Qwen2.5-VL, plus
# a `processor/` (Qwen2-VL's image processor): the prompt encoding sees the input pictures, and their VAE
# latents join the image tokens (`pipelines.diffusion.qwenimage_edit_text`). 2511 is a transformer config
# (`zero_cond_t`). A plain Text Encode on it is Qwen-Image's (as ComfyUI's CLIPTextEncode). Diffusers folders only.
QWENIMAGE_EDIT = Family(
    name="qwenimage_edit",
    title="Qwen-Image-Edit",
    pipeline_classes=("QwenImageEditPipeline", "QwenImageEditPlusPipeline"),
    denoiser_subfolder="transformer",
    denoiser_ref=_diffusers("QwenImageTransformer2DModel"),
    text_encoders=QWENIMAGE.text_encoders,
    cuda_dtype_name="bfloat16",
    max_text_tokens=512,
    latent_rgb_factors=(),
    vae_ref=_diffusers("AutoencoderKLQwenImage"),
    denoiser_blocks=("transformer_blocks",),
    flow=True,
    native_size=1024,
    size_multiple=16,
    prompt_encoder="qwenimage",
    denoiser_call="qwenimage",
    packs_latents=True,
    # Also names QwenImageEditInpaintPipeline folders, which loading then refuses (not in pipeline_classes).
    class_marker="QwenImageEdit",
)

# Krea 2 (and Turbo, `is_distilled` in model_index.json): Qwen3-VL tapped at twelve layers (stacked per token,
# a fixed-length prompt block with its mask), a single-stream MMDiT with its own text-fusion blocks over 2x2-
# packed latents, Qwen-Image's VAE. Diffusers folders only; the loop is `krea2_sampling`.
KREA2 = Family(
    name="krea2",
    title="Krea 2",
    pipeline_classes=("Krea2Pipeline",),
    denoiser_subfolder="transformer",
    denoiser_ref=_diffusers("Krea2Transformer2DModel"),
    text_encoders=(
        TextEncoderSlot(
            "text_encoder",
            "tokenizer",
            _transformers("Qwen3VLModel"),
            # The language model's layers run per prompt; the vision tower's blocks never do for text.
            ("language_model.layers", "visual.blocks"),
        ),
    ),
    cuda_dtype_name="bfloat16",
    max_text_tokens=512,  # Krea2Pipeline's max_sequence_length default (the prompt block's length)
    latent_rgb_factors=(),
    vae_ref=_diffusers("AutoencoderKLQwenImage"),
    denoiser_blocks=("text_fusion.layerwise_blocks", "text_fusion.refiner_blocks", "transformer_blocks"),
    flow=True,
    native_size=1024,
    size_multiple=16,  # the VAE's 8 x the 2x2 packing (a folder's configs override it)
    joint_text_tokens=512,
    prompt_encoder="krea2",
    denoiser_call="krea2",
    packs_latents=True,
    class_marker="Krea2",
)

# FLUX.2 [klein]: one Qwen3 text encoder (three hidden layers stacked per token), Flux2's double- and
# single-stream DiT over 2x2-packed latents, its own VAE (32 channels, batch-norm statistics instead of a
# scaling factor). Diffusers folders only; the loop is `flux2_sampling`.
FLUX2_KLEIN = Family(
    name="flux2_klein",
    title="FLUX.2 [klein]",
    pipeline_classes=("Flux2KleinPipeline",),
    denoiser_subfolder="transformer",
    denoiser_ref=_diffusers("Flux2Transformer2DModel"),
    text_encoders=(TextEncoderSlot("text_encoder", "tokenizer", _transformers("Qwen3Model"), ("layers",)),),
    cuda_dtype_name="bfloat16",  # FLUX.2 [klein] is published in bf16
    max_text_tokens=512,  # Flux2KleinPipeline's max_sequence_length default
    latent_rgb_factors=(),  # 32 latent channels: previews show the first three
    vae_ref=_diffusers("AutoencoderKLFlux2"),
    denoiser_blocks=("transformer_blocks", "single_transformer_blocks"),
    flow=True,
    native_size=1024,
    size_multiple=16,  # the VAE's 8 x the pipeline's 2x2 packing (a folder's configs override it)
    joint_text_tokens=512,  # all 512 padded prompt tokens join the image tokens (no mask)
    prompt_encoder="qwen_flux2",
    denoiser_call="flux2",
    packs_latents=True,
    class_marker="Flux2Klein",
    name_markers=("klein",),
)

# FLUX.2 [dev]: Klein's transformer and VAE with a Mistral3 text encoder (system prompt, hidden layers
# 10/20/30) and an embedded guidance value instead of CFG. Diffusers folders only.
FLUX2_DEV = Family(
    name="flux2_dev",
    title="FLUX.2 [dev]",
    pipeline_classes=("Flux2Pipeline",),
    denoiser_subfolder="transformer",
    denoiser_ref=_diffusers("Flux2Transformer2DModel"),
    text_encoders=(
        TextEncoderSlot(
            "text_encoder",
            "tokenizer",
            _transformers("Mistral3ForConditionalGeneration"),
            ("model.language_model.layers",),
        ),
    ),
    cuda_dtype_name="bfloat16",
    max_text_tokens=512,  # Flux2Pipeline's max_sequence_length default
    latent_rgb_factors=(),
    vae_ref=_diffusers("AutoencoderKLFlux2"),
    denoiser_blocks=("transformer_blocks", "single_transformer_blocks"),
    flow=True,
    native_size=1024,
    size_multiple=16,
    joint_text_tokens=512,
    prompt_encoder="mistral_flux2",
    denoiser_call="flux2",
    packs_latents=True,
    class_marker="Flux2",
    name_markers=("flux2", "flux-2", "flux.2"),
)

# FLUX.3: Qwen3-VL read through its chat template (eight hidden layers stacked per token, a window padded to a
# multiple of 80 tokens), per-mode blocks (text, image) then joint single blocks over 2x2-packed latents,
# FLUX.2's VAE (batch-norm statistics). Modular only in diffusers (`Flux3ModularPipeline`); diffusers folders
# only here; the loop is `flux3_sampling`, text to image.
FLUX3 = Family(
    name="flux3",
    title="FLUX.3",
    pipeline_classes=("Flux3ModularPipeline", "Flux3DistilledModularPipeline"),
    denoiser_subfolder="transformer",
    denoiser_ref=_diffusers("Flux3Transformer2DModel"),
    text_encoders=(
        TextEncoderSlot(
            "text_encoder",
            "tokenizer",
            _transformers("Qwen3VLForConditionalGeneration"),
            # The language model's layers run per prompt; the vision tower's blocks never do for text.
            ("model.language_model.layers", "model.visual.blocks"),
        ),
    ),
    cuda_dtype_name="bfloat16",
    max_text_tokens=8192,  # Flux3TextEncoderStep's max_sequence_length default (the window is usually 80-240)
    latent_rgb_factors=(),
    vae_ref=_diffusers("AutoencoderKLFlux2"),
    denoiser_blocks=("txt_mode_blocks", "mode_blocks.image", "single_transformer_blocks"),
    flow=True,
    native_size=1024,
    size_multiple=16,  # the VAE's 8 x the 2x2 packing (a folder's configs override it)
    joint_text_tokens=240,  # a typical window (three pad multiples): text joins the image in the single blocks
    prompt_encoder="flux3",
    denoiser_call="flux3",
    packs_latents=True,
    class_marker="Flux3",
    name_markers=("flux3", "flux-3", "flux.3", "flux_3"),
)
