"""Qwen3-4B's published config (the text encoder of Z-Image Turbo and FLUX.2 [klein] 4B), for the shipped
released-size config folders.

Lives here: `QWEN3_4B`. May import: nothing. Its own module so that `comfy_layouts.released` and
`comfy_layouts.flux2_released` (which `released` calls) both read it without importing each other.
"""

QWEN3_4B = {  # Qwen/Qwen3-4B (Z-Image-Turbo's text_encoder)
    "architectures": ["Qwen3Model"],
    "model_type": "qwen3",
    "hidden_size": 2560,
    "intermediate_size": 9728,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000,
    "tie_word_embeddings": True,
}
