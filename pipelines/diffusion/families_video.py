"""The video families' registry entries: Wan 2.1/2.2 (text and image to video, TI2V) and LTX-2 (video with
sound), declared as data.

Lives here: `WAN`, `LTX2`, `MINIMAX`. The registry that lists them, the detection orders and the lookups are
`pipelines.diffusion.families`; this file only holds the entries.
May import: stdlib and pipelines.diffusion.family_types (classes are named, resolved on first use).
"""

from __future__ import annotations

from pipelines.diffusion.family_types import ClassRef, Family, TextEncoderSlot, _diffusers, _transformers

# Wan 2.1 / 2.2 text-to-video: UMT5 text encoder (512 tokens, padded positions zeroed and kept), a 3D DiT over
# (frames, h, w) latent patches with cross-attention to the text, the Wan VAE (16 channels, 4x in time, 8x in
# space by default; its config says). Wan 2.2 A14B adds a low-noise expert (`transformer_2`) used below
# `boundary_ratio` (model_index.json). Diffusers folders only; the loop is `pipelines.diffusion.wan_sampling`.
WAN = Family(
    name="wan",
    title="Wan",
    pipeline_classes=("WanPipeline", "WanImageToVideoPipeline"),
    denoiser_subfolder="transformer",
    denoiser_ref=_diffusers("WanTransformer3DModel"),
    # UMT5-XXL (5.7B) may stream block by block; its 256k x 4096 embedding table stays outside the blocks.
    text_encoders=(
        TextEncoderSlot("text_encoder", "tokenizer", _transformers("UMT5EncoderModel"), ("encoder.block",)),
    ),
    cuda_dtype_name="bfloat16",  # Wan is published in bf16
    max_text_tokens=512,  # WanPipeline's max_sequence_length default
    latent_rgb_factors=(),  # 16 latent channels: previews show the first three
    vae_ref=_diffusers("AutoencoderKLWan"),
    denoiser_blocks=("blocks",),
    flow=True,
    native_size=832,  # Wan 2.1's 832x480 (the height comes from the Empty Video Latent)
    size_multiple=16,  # the VAE's 8 x the transformer's 2x2 patches (a folder's configs override it)
    prompt_encoder="umt5",
    denoiser_call="wan",
    class_marker="Wan",
    name_markers=("wan2", "wan_2"),
)

# LTX-2 (text to video with sound): Gemma 3 (every hidden state stacked, left-padded to 1024 tokens) through
# the text connectors, a joint audio-video DiT, the LTX-2 video VAE and an audio VAE + vocoder. Diffusers
# folders only; the loop is `pipelines.diffusion.ltx2_sampling`.
LTX2 = Family(
    name="ltx2",
    video_fps=24.0,
    title="LTX-2",
    pipeline_classes=("LTX2Pipeline", "LTX2ImageToVideoPipeline"),
    denoiser_subfolder="transformer",
    denoiser_ref=_diffusers("LTX2VideoTransformer3DModel"),
    text_encoders=(
        TextEncoderSlot(
            "text_encoder",
            "tokenizer",
            _transformers("Gemma3ForConditionalGeneration"),
            ("model.language_model.layers", "model.vision_tower.encoder.layers"),
        ),
        # The connectors turn Gemma's stacked states into the video and audio streams' text tokens.
        TextEncoderSlot(
            "connectors", "tokenizer", ClassRef("diffusers.pipelines.ltx2", "LTX2TextConnectors")
        ),
    ),
    cuda_dtype_name="bfloat16",  # LTX-2 is published in bf16
    max_text_tokens=1024,  # LTX2Pipeline's max_sequence_length default
    latent_rgb_factors=(),  # 128 latent channels: previews show the first three
    vae_ref=_diffusers("AutoencoderKLLTX2Video"),
    denoiser_blocks=("transformer_blocks",),
    flow=True,
    native_size=768,  # the pipeline's 768x512 default
    size_multiple=32,  # the pipeline's check (a folder's configs override it)
    prompt_encoder="gemma_ltx2",
    denoiser_call="ltx2",
    class_marker="LTX2",
    name_markers=("ltx-2", "ltx2", "ltx_2"),  # ComfyUI's files: ltx-2.3-22b-dev-fp8, ltx-2.5-video-vae-bf16
    lora_layout="ltx2",  # ComfyUI's LTX-2 LoRAs name the checkpoint's layers (pipelines.diffusion.lora_ltx2)
)

# MiniMax H3 (video with stereo sound, modular only in diffusers: `MiniMaxH3ModularPipeline`): Qwen3-VL read at
# `hidden_states[50]` (the prompt verbatim, no template, no padding), one DiT over a packed sequence of text,
# audio and video rows, guidance-distilled (no negative prompt, no guidance scale), two rectified-flow
# schedules (video shift 12, audio shift 3). Diffusers folders only; the loop is `pipelines.diffusion.minimax_sampling`.
MINIMAX = Family(
    name="minimax",
    video_fps=24.0,
    title="MiniMax H3",
    pipeline_classes=("MiniMaxH3ModularPipeline",),
    denoiser_subfolder="transformer",
    denoiser_ref=_diffusers("MiniMaxH3Transformer3DModel"),
    text_encoders=(
        TextEncoderSlot(
            "text_encoder",
            "tokenizer",
            _transformers("Qwen3VLForConditionalGeneration"),
            ("model.language_model.layers", "model.visual.blocks"),
        ),
    ),
    cuda_dtype_name="bfloat16",  # MiniMax H3 is published in bf16 (its heads and timestep MLP in fp32)
    max_text_tokens=None,  # the pipeline neither pads nor truncates the prompt
    latent_rgb_factors=(),  # 24 latent channels: previews show the first three
    vae_ref=_diffusers("AutoencoderKLMiniMaxH3"),
    denoiser_blocks=("transformer_blocks",),
    flow=True,
    native_size=1344,  # the pipeline's 1344x768 (16:9) canvas
    size_multiple=32,  # the VAE's 16 x the transformer's 2x2 patches (a folder's configs override it)
    prompt_encoder="minimax",
    denoiser_call="minimax",
    class_marker="MiniMaxH3",
    name_markers=("minimax_h3", "minimax-h3", "fasth3"),  # FastVideo's FastH3: distilled H3
)
