"""The Qwen-Image 2.1 family's registry entry (text to image, editing and Turbo: one pipeline class).

Lives here: `QWENIMAGE21`, `TURBO_SIGMAS`. The registry that lists it is `pipelines.diffusion.families`.
May import: stdlib and pipelines.diffusion.family_types (classes are named, resolved on first use).

Qwen-Image 2.1 is not a config of Qwen-Image: Qwen3-VL (with a `processor/`, no `tokenizer/`) encodes the
prompt and the edit pictures together, a single-stream block-causal transformer takes the latents unpacked
(one token per latent pixel; each image slot of the prompt stands for a 2x2 group of them), and its own VAE
has 64 channels and 16 pixels per latent, RGBA in and out. Turbo is the same classes with `sample_sigmas` in
model_index.json.
"""

from __future__ import annotations

from pipelines.diffusion.family_types import Family, TextEncoderSlot, _diffusers, _transformers

# Qwen-Image 2.1 Turbo's shipped sampling grid (model_index.json `sample_sigmas`, without the final 0; ComfyUI's
# Turbo templates write the same list, with the 0, in a ManualSigmas node).
TURBO_SIGMAS = (1.0, 0.978453, 0.95418, 0.926626, 0.89508, 0.845148, 0.704534, 0.414568)

QWENIMAGE21 = Family(
    name="qwenimage21",
    title="Qwen-Image 2.1",
    pipeline_classes=("QwenImage21Pipeline",),
    denoiser_subfolder="transformer",
    denoiser_ref=_diffusers("QwenImage21Transformer2DModel"),
    text_encoders=(
        TextEncoderSlot(
            "text_encoder",
            "processor",  # the folder's tokenizer lives in its processor/ (no tokenizer/ subfolder)
            _transformers("Qwen3VLForConditionalGeneration"),
            # The language model's layers run per prompt, the vision tower's blocks per edit picture.
            ("model.language_model.layers", "model.visual.blocks"),
        ),
    ),
    cuda_dtype_name="bfloat16",  # published in bf16
    max_text_tokens=None,  # the pipeline does not cut prompts
    latent_rgb_factors=(),  # 64 latent channels: previews show the first three
    vae_ref=_diffusers("AutoencoderKLQwenImage21"),
    denoiser_blocks=("transformer_blocks",),
    flow=True,
    native_size=1024,  # the pipeline's output_resolution default
    size_multiple=16,  # x the VAE's 16 = the pipeline's multiple of 32 (a 2x2 group of latents per slot)
    prompt_encoder="qwenimage21",
    denoiser_call="qwenimage21",
    class_marker="QwenImage21",
    name_markers=("qwen_image_2.1", "qwen-image-2.1", "qwen_image_2_1", "qwenimage21", "qwen-image-2_1"),
)
