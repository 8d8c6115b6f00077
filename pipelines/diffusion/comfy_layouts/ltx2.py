"""Tensor names of ComfyUI's LTX-2 files, to and from diffusers' LTX-2 classes.

Lives here: `LTX2_FILES`, `is_ltx2_checkpoint`, `is_gemma3_file`, `CHECKPOINT_PARTS`, `part_to_diffusers`,
`part_from_diffusers`, `gemma_to_diffusers`, `gemma_from_diffusers`, `video_vae_table`. May import: stdlib,
torch, diffusers (its single-file converters).

ComfyUI's LTX-2 checkpoint (`ltx-2.3-22b-dev-fp8.safetensors`, read by CheckpointLoaderSimple,
LTXVAudioVAELoader and LTXAVTextEncoderLoader) is Lightricks' one file in the original names (diffusers'
`convert_ltx2_to_diffusers.py` and `single_file_utils.convert_ltx2_*` read the same file):
- the transformer under `model.diffusion_model.` (`patchify_proj`, `adaln_single`, `av_ca_*_adaln_single`,
  `q_norm`; LTX-2.3 adds `prompt_adaln_single`, `audio_prompt_adaln_single`, gate logits and per-block prompt
  tables, whose names diffusers keeps but for the two AdaLNs);
- the text connectors under `model.diffusion_model.{video,audio}_embeddings_connector.` and the
  projection of Gemma's stacked states, `text_embedding_projection.aggregate_embed` (LTX-2.0) or its
  per-modality `video_aggregate_embed` / `audio_aggregate_embed` (LTX-2.3), with or without the prefix;
- `vae.` (the video VAE: flat `down_blocks.N` / `up_blocks.N` lists, `res_blocks`, `per_channel_statistics`),
  `audio_vae.` (diffusers' names but the statistics) and `vocoder.` (HiFi-GAN's `ups`, `resblocks`,
  `conv_pre`, `conv_post`).
The transformer and the audio VAE go through diffusers' own converters. Diffusers' video VAE converter hard-codes
the released VAE's four stages, so the video VAE goes through `video_vae_table`, the same flat order sized from
the module's own names (as `keys.wan_vae_table` does for Wan). The Gemma 3 file (`gemma_3_12B_it*`) is
ComfyUI's repackaging (comfy/text_encoders/llama.py `Gemma3_12B`): the language model as `model.*`, the SigLIP
tower as `vision_model.*`, `multi_modal_projector.*`, and maybe the tokenizer as a `spiece_model` byte tensor.
The `*_from_diffusers` functions are the inverse, used to write fixtures; a test checks each round trip.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import torch

# The file names ComfyUI's LTX-2.3 templates load (video_ltx2_3_i2v, video_ltx2_3_t2v).
LTX2_FILES = {
    "checkpoint": "ltx-2.3-22b-dev-fp8.safetensors",  # models/checkpoints/
    "text_encoder": "gemma_3_12B_it_fp4_mixed.safetensors",  # models/text_encoders/
}
DIT = "model.diffusion_model."
# Each component's file prefix; the connectors are picked by name (`_is_connector`), not by prefix.
CHECKPOINT_PARTS = {
    "transformer": DIT,
    "connectors": "",
    "vae": "vae.",
    "audio_vae": "audio_vae.",
    "vocoder": "vocoder.",
}
_CONNECTOR_ROOTS = (
    "video_embeddings_connector.",
    "audio_embeddings_connector.",
    "text_embedding_projection.",
)


def is_ltx2_checkpoint(keys: list[str] | Mapping[str, object]) -> bool:
    """Whether a file is LTX-2's one-file checkpoint (its audio-video transformer under ComfyUI's prefix)."""
    return any(k.startswith(DIT + "av_ca_a2v_gate_adaln_single.") for k in keys)


def is_gemma3_file(keys: list[str] | Mapping[str, object]) -> bool:
    """Whether a text encoder file is ComfyUI's Gemma 3 (Gemma's four norms per layer, q/k norms)."""
    names = list(keys)
    return any(".pre_feedforward_layernorm." in k for k in names) and any(
        ".self_attn.q_norm." in k for k in names
    )


def _is_connector(key: str) -> bool:
    return key.removeprefix(DIT).startswith(_CONNECTOR_ROOTS)


def part_keys(part: str, keys: list[str]) -> list[str]:
    """The file keys of one component of the checkpoint."""
    if part == "connectors":
        return [k for k in keys if _is_connector(k)]
    prefix = CHECKPOINT_PARTS[part]
    return [k for k in keys if k.startswith(prefix) and not _is_connector(k)]


# --- the transformer ----------------------------------------------------------------------------------

# diffusers -> original, for the names diffusers' converter does not rename back (applied after it).
_LTX23_TOP = (
    ("prompt_adaln_single.", "prompt_adaln."),
    ("audio_prompt_adaln_single.", "audio_prompt_adaln."),
)
_TRANSFORMER_TOP = (  # diffusers -> original prefixes of the top-level modules
    ("proj_in.", "patchify_proj."),
    ("audio_proj_in.", "audio_patchify_proj."),
    ("time_embed.", "adaln_single."),
    ("audio_time_embed.", "audio_adaln_single."),
    ("prompt_adaln.", "prompt_adaln_single."),
    ("audio_prompt_adaln.", "audio_prompt_adaln_single."),
    ("av_cross_attn_video_scale_shift.", "av_ca_video_scale_shift_adaln_single."),
    ("av_cross_attn_video_a2v_gate.", "av_ca_a2v_gate_adaln_single."),
    ("av_cross_attn_audio_scale_shift.", "av_ca_audio_scale_shift_adaln_single."),
    ("av_cross_attn_audio_v2a_gate.", "av_ca_v2a_gate_adaln_single."),
)
_BLOCK_PARTS = {  # diffusers -> original names inside a transformer block
    "video_a2v_cross_attn_scale_shift_table": "scale_shift_table_a2v_ca_video",
    "audio_a2v_cross_attn_scale_shift_table": "scale_shift_table_a2v_ca_audio",
    "norm_q": "q_norm",
    "norm_k": "k_norm",
}


def _transformer_to_diffusers(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    from diffusers.loaders.single_file_utils import convert_ltx2_transformer_to_diffusers

    out = convert_ltx2_transformer_to_diffusers({k: v for k, v in state.items() if not _is_connector(k)})
    renamed = {}
    for name, t in out.items():
        for original, ours in _LTX23_TOP:
            if name.startswith(original):
                name = ours + name.removeprefix(original)
        renamed[name] = t
    return renamed


def _transformer_from_diffusers(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for name, t in state.items():
        new = next(
            (orig + name.removeprefix(ours) for ours, orig in _TRANSFORMER_TOP if name.startswith(ours)), name
        )
        new = ".".join(_BLOCK_PARTS.get(p, p) for p in new.split("."))
        out[DIT + new] = t
    return out


# --- the text connectors ------------------------------------------------------------------------------

_CONNECTOR_PARTS = {  # original -> diffusers, per dotted part
    "video_embeddings_connector": "video_connector",
    "audio_embeddings_connector": "audio_connector",
    "transformer_1d_blocks": "transformer_blocks",
    "q_norm": "norm_q",
    "k_norm": "norm_k",
}
_PROJECTIONS = {  # original -> diffusers: Gemma's stacked states into the connectors' width
    "text_embedding_projection.aggregate_embed.": "text_proj_in.",  # LTX-2.0
    "text_embedding_projection.video_aggregate_embed.": "video_text_proj_in.",  # LTX-2.3, per modality
    "text_embedding_projection.audio_aggregate_embed.": "audio_text_proj_in.",
}


def _connectors_to_diffusers(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for key, t in state.items():
        name = key.removeprefix(DIT)
        projection = next((p for p in _PROJECTIONS if name.startswith(p)), None)
        if projection is not None:
            out[_PROJECTIONS[projection] + name.removeprefix(projection)] = t
        elif name.startswith(_CONNECTOR_ROOTS):
            out[".".join(_CONNECTOR_PARTS.get(p, p) for p in name.split("."))] = t
    return out


def _connectors_from_diffusers(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """As LTX-2's file stores them: the connectors under the transformer's prefix, the projection at the root."""
    inverse_parts = {v: k for k, v in _CONNECTOR_PARTS.items()}
    inverse_projections = {v: k for k, v in _PROJECTIONS.items()}
    out: dict[str, torch.Tensor] = {}
    for name, t in state.items():
        projection = next((p for p in inverse_projections if name.startswith(p)), None)
        if projection is not None:
            out[inverse_projections[projection] + name.removeprefix(projection)] = t
        else:
            out[DIT + ".".join(inverse_parts.get(p, p) for p in name.split("."))] = t
    return out


# --- the video VAE ------------------------------------------------------------------------------------

_VAE_STATS = {
    "latents_mean": "per_channel_statistics.mean-of-means",
    "latents_std": "per_channel_statistics.std-of-means",
}
# In the file, not in diffusers' module (diffusers' converter drops them too).
_VAE_DROPPED = ("per_channel_statistics.channel", "per_channel_statistics.mean-of-stds")
_VAE_DECODER_TOP = {"time_embedder": "last_time_embedder", "scale_shift_table": "last_scale_shift_table"}


def video_vae_table(diffusers_keys: list[str]) -> list[tuple[str, str]]:
    """(diffusers prefix, original prefix) of every VAE block, the longest diffusers prefix first.

    The original keeps flat lists: the encoder's `down_blocks.N` is each stage's resnets, then its downsampler
    (where it has one), then the mid block; the decoder's `up_blocks.N` is the mid block, then per stage its
    upsampler (where it has one) and its resnets. diffusers' 4-stage rename table is this order at full size.
    """

    def stages(side: str, block: str) -> list[int]:
        found = {int(m.group(1)) for k in diffusers_keys if (m := re.match(rf"{side}\.{block}\.(\d+)\.", k))}
        return sorted(found)

    def has(prefix: str) -> bool:
        return any(k.startswith(prefix) for k in diffusers_keys)

    table: list[tuple[str, str]] = []
    at = 0
    for i in stages("encoder", "down_blocks"):
        table.append((f"encoder.down_blocks.{i}.", f"encoder.down_blocks.{at}."))
        at += 1
        if has(f"encoder.down_blocks.{i}.downsamplers.0."):
            table.append((f"encoder.down_blocks.{i}.downsamplers.0.", f"encoder.down_blocks.{at}."))
            at += 1
    table.append(("encoder.mid_block.", f"encoder.down_blocks.{at}."))
    table.append(("decoder.mid_block.", "decoder.up_blocks.0."))
    at = 1
    for i in stages("decoder", "up_blocks"):
        if has(f"decoder.up_blocks.{i}.upsamplers.0."):
            table.append((f"decoder.up_blocks.{i}.upsamplers.0.", f"decoder.up_blocks.{at}."))
            at += 1
        table.append((f"decoder.up_blocks.{i}.", f"decoder.up_blocks.{at}."))
        at += 1
    return sorted(table, key=lambda pair: -len(pair[0]))


def _vae_name_to_original(name: str, table: list[tuple[str, str]]) -> str:
    if name in _VAE_STATS:
        return _VAE_STATS[name]
    side, _, rest = name.partition(".")
    if side == "decoder" and rest.split(".")[0] in _VAE_DECODER_TOP:
        head, _, tail = rest.partition(".")
        return f"decoder.{_VAE_DECODER_TOP[head]}.{tail}" if tail else f"decoder.{_VAE_DECODER_TOP[head]}"
    for ours, orig in table:
        if name.startswith(ours):
            tail = name.removeprefix(ours)
            return orig + ".".join("res_blocks" if p == "resnets" else p for p in tail.split("."))
    return name  # conv_in / conv_out / norms: the same in both


def _video_vae_from_diffusers(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    table = video_vae_table(list(state))
    return {"vae." + _vae_name_to_original(k, table): v for k, v in state.items()}


def video_vae_to_diffusers(
    state: Mapping[str, torch.Tensor], module_keys: list[str]
) -> dict[str, torch.Tensor]:
    """The checkpoint's `vae.*` tensors in the names of a module with `module_keys`."""
    table = video_vae_table(module_keys)
    inverse = {_vae_name_to_original(k, table): k for k in module_keys}
    out: dict[str, torch.Tensor] = {}
    for key, t in state.items():
        name = key.removeprefix("vae.")
        if name.startswith(_VAE_DROPPED):
            continue
        out[inverse.get(name, name)] = t
    return out


# --- the audio VAE and the vocoder --------------------------------------------------------------------

_VOCODER_PARTS = {"ups": "upsamplers", "resblocks": "resnets", "conv_pre": "conv_in", "conv_post": "conv_out"}


def _audio_vae_to_diffusers(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    from diffusers.loaders.single_file_utils import convert_ltx2_audio_vae_to_diffusers

    kept = {k: v for k, v in state.items() if not k.removeprefix("audio_vae.").startswith(_VAE_DROPPED)}
    return convert_ltx2_audio_vae_to_diffusers(kept)


def _audio_vae_from_diffusers(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {"audio_vae." + _VAE_STATS.get(k, k): v for k, v in state.items()}


def _vocoder_to_diffusers(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {
        ".".join(_VOCODER_PARTS.get(p, p) for p in k.removeprefix("vocoder.").split(".")): v
        for k, v in state.items()
    }


def _vocoder_from_diffusers(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    inverse = {v: k for k, v in _VOCODER_PARTS.items()}
    return {"vocoder." + ".".join(inverse.get(p, p) for p in k.split(".")): v for k, v in state.items()}


def part_to_diffusers(
    part: str, state: Mapping[str, torch.Tensor], module_keys: list[str] | None = None
) -> dict[str, torch.Tensor]:
    """One component's checkpoint tensors (stubs or real, fp8 scales already applied) in diffusers' names;
    the video VAE needs the module's names (`module_keys`) to size its block table."""
    if part == "transformer":
        return _transformer_to_diffusers(state)
    if part == "connectors":
        return _connectors_to_diffusers(state)
    if part == "vae":
        return video_vae_to_diffusers(state, module_keys or [])
    if part == "audio_vae":
        return _audio_vae_to_diffusers(state)
    if part == "vocoder":
        return _vocoder_to_diffusers(state)
    raise ValueError(f"unknown LTX-2 checkpoint part {part!r}")


def part_from_diffusers(part: str, state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A diffusers component's state in the checkpoint's names (to write fixtures)."""
    writers = {
        "transformer": _transformer_from_diffusers,
        "connectors": _connectors_from_diffusers,
        "vae": _video_vae_from_diffusers,
        "audio_vae": _audio_vae_from_diffusers,
        "vocoder": _vocoder_from_diffusers,
    }
    return writers[part](state)


# --- the Gemma 3 text encoder file --------------------------------------------------------------------

_GEMMA_ROOTS = (  # ComfyUI -> transformers' Gemma3ForConditionalGeneration
    ("model.", "model.language_model."),
    ("vision_model.", "model.vision_tower."),
    ("multi_modal_projector.", "model.multi_modal_projector."),
)
TOKENIZER_KEY = "spiece_model"  # the SentencePiece model's bytes, where ComfyUI's file carries them


def gemma_to_diffusers(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """ComfyUI's Gemma 3 file in `Gemma3ForConditionalGeneration`'s names (the tokenizer bytes left out)."""
    out: dict[str, torch.Tensor] = {}
    for key, t in state.items():
        if key == TOKENIZER_KEY:
            continue
        root = next(((c, ours) for c, ours in _GEMMA_ROOTS if key.startswith(c)), None)
        out[root[1] + key.removeprefix(root[0]) if root else key] = t
    return out


def gemma_from_diffusers(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A `Gemma3ForConditionalGeneration` state as ComfyUI's file (no `lm_head`: tied to the embeddings)."""
    out: dict[str, torch.Tensor] = {}
    for key, t in state.items():
        if key.startswith("lm_head."):
            continue
        root = next(((c, ours) for c, ours in _GEMMA_ROOTS if key.startswith(ours)), None)
        out[root[0] + key.removeprefix(root[1]) if root else key] = t
    return out
