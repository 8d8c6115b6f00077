"""ComfyUI's file layout for the 2026 families: `models/diffusion_models/`, `models/text_encoders/`, `models/vae/`.

Lives here (submodules): `keys` (ComfyUI <-> diffusers tensor names per family), `scaled_fp8` (ComfyUI's fp8
"scaled" weights), `comfy_quant` (ComfyUI's `comfy_quant` layers: int8 / ConvRot, NVFP4, MXFP8, fp8, read
dequantized by `lazy_load.header_stubs`) and `quant_writer` (writing them, for tests), `variants` (the shipped config folders and which one a file's shapes fit), `common` (shared
helpers), the loaders the split loader nodes call (`loaders` for transformers, `text_encoders`, `vaes`, `clip_vision`
for Wan 2.1 I2V's image encoder), and
`writer` (the inverse: a diffusers folder written out as ComfyUI's files, for tests and demos). May import:
stdlib, torch, safetensors, diffusers, transformers, memory, pipelines.paths, pipelines.diffusion,
pipelines.quant.

LTX-2's files (the one-file checkpoint and the Gemma 3 file) are `ltx2` (names), `ltx2_loaders`, `ltx2_released`
(LTX-2.0 19B's config folder) and `ltx2_writer` (fixtures).

Families: Z-Image, Qwen-Image, FLUX.2 [klein] / [dev] and Wan 2.1 / 2.2 (one expert per file); Qwen-Image 2.1
(`qwen21`) and MiniMax H3 (`minimax` names, `minimax_load` for its two VAE files and the curve form). The family
and its size come from the tensors: names say the family, shapes pick the config folder.
"""
