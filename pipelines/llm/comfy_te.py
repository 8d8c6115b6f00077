"""ComfyUI's text-encoder single files (`models/text_encoders/`) as the LLMs they are, for Load LLM.

Lives here: `comfy_te_kind`, `open_comfy_te_llm`, `TextEncoderLM`, `head_source`. Imports torch, transformers,
`memory`, `pipelines.diffusion` (the diffusion side's readers of these files: `comfy_layouts.text_encoders`,
`comfy_layouts.ltx2` / `ltx2_loaders`, the shipped config folders and tokenizers), `pipelines.llm.hf_loader` and
`pipelines.llm.comfy_qwen35` (Qwen3.5's files, which no diffusion family reads); never nodes/, app/ or Qt.

ComfyUI's TextGenerate generates with the LLM inside a CLIP loader's file (comfy_extras/nodes_textgen.py calls
`clip.generate`); its logits are `lm_head` where the model's config has one and the input embedding otherwise
(comfy/text_encoders/llama.py `BaseGenerate.logits`: Qwen3-4B, Qwen3-VL-4B and Gemma 3 12B tie them, Qwen3-8B and
Qwen3-VL-8B carry an `lm_head`). Here the file is read exactly as the diffusion text-encoder loader reads it
(same function, same ledger key `<file>#text_encoder@<dtype>`), so a graph that uses the file as its prompt
encoder and as its prompt writer holds one ledger entry; `TextEncoderLM` puts the head on whatever module that
entry builds (Krea 2's `Qwen3VLModel` has none: the tied embedding is the head) at each use. A file with no
`lm_head` whose config does not tie it (or a MiniMax H3 file cut after layer 50) cannot generate: said at load.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from transformers import AutoConfig, PretrainedConfig

from memory import MemoryManager, ModelHandle
from pipelines.diffusion.families import FAMILIES, UnsupportedModelError

# The text-encoder kinds (`comfy_layouts.text_encoders.text_encoder_kind`, plus Gemma 3) that are decoder LLMs;
# UMT5 is an encoder only. The families each kind may be read as, MiniMax H3's left out (its file stops early).
GENERATING_KINDS = ("qwen3", "qwen2.5-vl", "qwen3-vl", "qwen3.5", "mistral", "gemma3")
_NOT_GENERATING_FAMILIES = ("minimax",)
# End-of-turn tokens of these models' chat formats (ComfyUI's stop tokens: Qwen 151643 / 151645, Gemma 1 / 106).
_END_TOKENS = ("<|im_end|>", "<|endoftext|>", "<end_of_turn>", "<eos>")


def comfy_te_kind(path: Path) -> str | None:
    """ "qwen3", "qwen3-vl", ... or "gemma3" for a ComfyUI text-encoder safetensors file that generates; else None."""
    from pipelines.diffusion.comfy_layouts.common import file_keys
    from pipelines.diffusion.comfy_layouts.ltx2 import is_gemma3_file
    from pipelines.diffusion.comfy_layouts.text_encoders import text_encoder_kind

    path = Path(path)
    if not path.is_file() or path.suffix.lower() != ".safetensors":
        return None
    keys = file_keys(path)
    if is_gemma3_file(keys):
        return "gemma3"
    kind = text_encoder_kind(keys)
    return kind if kind in GENERATING_KINDS else None


def _tied(config: PretrainedConfig) -> bool:
    """Whether the head is the input embedding (the text config's flag where it has one, else the model's)."""
    text = config.get_text_config()
    flag = getattr(text, "tie_word_embeddings", None)
    if flag is None or text is config:
        flag = getattr(config, "tie_word_embeddings", flag)
    return bool(flag)


def head_source(keys: list[str], config: PretrainedConfig, file_name: str) -> str:
    """ "lm_head" (the file carries one) or "embedding" (tied); raises when the file cannot generate."""
    if _tied(config):
        return "embedding"
    if any(k.startswith(("lm_head.", "model.lm_head.")) for k in keys):
        return "lm_head"
    raise UnsupportedModelError(
        f"{file_name}: this text encoder file has no lm_head and its config does not tie the embeddings, so it "
        "cannot generate text (a prompt encoder only)"
    )


class TextEncoderLM(torch.nn.Module):
    """A text encoder module seen as a causal LM: its language model, then the head (`lm_head` or the tied
    embedding, Gemma's logit soft-capping where set). Called as `generate._forward` calls a transformers LM."""

    def __init__(self, module: torch.nn.Module, text_config: PretrainedConfig, head: str, name: str) -> None:
        super().__init__()
        self.module = module
        self.text_model = _text_model(module, name)
        if head == "lm_head":
            lm_head = getattr(module, "lm_head", None)
            if not isinstance(lm_head, torch.nn.Linear):
                raise UnsupportedModelError(
                    f"{name}: its lm_head is not part of the text encoder loaded from it, so it cannot generate"
                )
            self.head_weight = lm_head.weight
        else:
            self.head_weight = self.text_model.get_input_embeddings().weight
        self.softcap = getattr(text_config, "final_logit_softcapping", None)

    def forward(
        self,
        input_ids: torch.Tensor,
        cache: Any = None,
        position_ids: torch.Tensor | None = None,
        use_cache: bool = True,
        logits_to_keep: int = 0,
        **_: Any,
    ) -> SimpleNamespace:
        out = self.text_model(
            input_ids=input_ids, cache=cache, position_ids=position_ids, use_cache=use_cache
        )
        hidden = out.last_hidden_state  # (B, S, H)
        if logits_to_keep:
            hidden = hidden[:, -logits_to_keep:]
        logits = torch.nn.functional.linear(hidden, self.head_weight.to(hidden.dtype))  # (B, S', V)
        if self.softcap:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return SimpleNamespace(logits=logits)


def _text_model(module: torch.nn.Module, name: str) -> torch.nn.Module:
    """The decoder stack: `language_model` of a VL model, `model` of a causal LM, or the module itself."""
    for candidate in (getattr(module, "language_model", None), getattr(module, "model", None), module):
        if isinstance(candidate, torch.nn.Module) and hasattr(candidate, "embed_tokens"):
            return candidate
    inner = getattr(module, "model", None)
    nested = getattr(inner, "language_model", None) if inner is not None else None
    if isinstance(nested, torch.nn.Module):
        return nested
    raise UnsupportedModelError(
        f"{name}: no language model found in the text encoder {type(module).__name__}"
    )


def _qwen_encoder(memory: MemoryManager, path: Path, kind: str) -> tuple[ModelHandle, Any, Path, Any]:
    """(handle, tokenizer source, text-encoder config folder, family) through the diffusion loader: the first
    family whose shipped config the file fits (they build the same LLM; the ledger key does not name one)."""
    from pipelines.diffusion.comfy_layouts.text_encoders import TEXT_ENCODER_FAMILIES, load_comfy_text_encoder

    families = [f for f in TEXT_ENCODER_FAMILIES[kind] if f not in _NOT_GENERATING_FAMILIES]
    for family in ("auto", *families):  # auto: one pass over every candidate; by family where several fit
        try:
            ref, _ = load_comfy_text_encoder(memory, path, family=family)
        except UnsupportedModelError:
            continue
        if ref.family.name in _NOT_GENERATING_FAMILIES:
            continue
        tokenizer = ref.tokenizers[0]
        return ref.handles[0], tokenizer, tokenizer.path / ref.family.text_encoders[0].subfolder, ref.family
    raise UnsupportedModelError(
        f"{path.name}: a {kind} text encoder of no size shipped for "
        f"{', '.join(FAMILIES[f].title for f in families)}, so Load LLM cannot read it"
    )


def _gemma_encoder(memory: MemoryManager, path: Path) -> tuple[ModelHandle, Any, Path, Any]:
    """LTX-2's Gemma 3 registered through `ltx2_loaders.register_gemma`, as the diffusion loader registers it
    (same key, module and tensors), its size picked from the file alone (the diffusion loader picks it from the
    checkpoint)."""
    from pipelines.diffusion.assembly import resolve_precision
    from pipelines.diffusion.comfy_layouts.ltx2_loaders import fitted_gemma, register_gemma
    from pipelines.diffusion.comfy_layouts.text_encoders import ShippedTokenizerSource
    from pipelines.diffusion.comfy_layouts.variants import folder_of, variants_for

    fam = FAMILIES["ltx2"]
    slot = fam.text_encoders[0]
    for variant in variants_for([fam.name]):
        if (fitted := fitted_gemma(path, variant)) is not None:
            break
    else:
        raise UnsupportedModelError(f"{path.name}: a Gemma 3 file of no size shipped for {fam.title}")
    folder = folder_of(variant)
    torch_dtype, storage = resolve_precision("auto", fam, memory.device)
    handle = register_gemma(memory, path, fitted, torch_dtype, storage)
    tokenizer = ShippedTokenizerSource(folder, slot.tokenizer_subfolder, slot.model_ref)
    return handle, tokenizer, folder / slot.subfolder, fam


def _end_ids(tokenizer: Any, config: PretrainedConfig) -> tuple[int, ...]:
    """The config's eos ids, the tokenizer's, and the chat format's end-of-turn tokens it knows."""
    ids: list[int] = []
    for source in (config.get_text_config(), config, tokenizer):
        eos = getattr(source, "eos_token_id", None)
        for i in eos if isinstance(eos, list | tuple) else [eos]:
            if isinstance(i, int) and i not in ids:
                ids.append(i)
    vocab = tokenizer.get_vocab()
    ids += [vocab[t] for t in _END_TOKENS if t in vocab and vocab[t] not in ids]
    return tuple(ids)


def open_comfy_te_llm(memory: MemoryManager, path: Path, kind: str) -> dict[str, Any]:
    """The fields of the `LLMModel` of a ComfyUI text-encoder file (`kind` from `comfy_te_kind`), its weights the
    ledger entry the diffusion text-encoder loader uses for the same file. `open_llm` builds the `LLMModel`
    (returning fields keeps this module from importing `pipelines.llm.runtime`, which imports it)."""
    from pipelines.diffusion.comfy_layouts.common import file_keys
    from pipelines.llm.hf_loader import LLMFiles

    path = Path(path)
    if kind == "qwen3.5":  # no diffusion family encodes with it: its own reader (`comfy_qwen35`)
        from pipelines.llm.comfy_qwen35 import qwen35_fields

        fields = qwen35_fields(memory, path)
        return fields | {"eos_ids": _end_ids(fields["tokenizer"], fields["config"])}
    if kind == "gemma3":
        handle, tokenizer_source, config_dir, _ = _gemma_encoder(memory, path)
    else:
        handle, tokenizer_source, config_dir, _ = _qwen_encoder(memory, path, kind)
    config = AutoConfig.from_pretrained(str(config_dir), local_files_only=True)
    head = head_source(file_keys(path), config, path.name)
    try:
        tokenizer = tokenizer_source.load()
    except FileNotFoundError as exc:
        raise UnsupportedModelError(
            f"{path.name}: no tokenizer is shipped for this size ({config_dir.parent.name}) and the file carries "
            "none; give Load LLM a transformers folder of the same model"
        ) from exc
    text = config.get_text_config()
    files = LLMFiles(source=path, folder=config_dir, weight_files=(path,), from_gguf=False)
    dtype = handle.spec.dtype or torch.float32

    def wrap(module: torch.nn.Module) -> torch.nn.Module:
        return TextEncoderLM(module, text, head, path.name)

    return dict(
        files=files,
        handle=handle,
        tokenizer=tokenizer,
        config=text,
        eos_ids=_end_ids(tokenizer, config),
        dtype=dtype,
        wrap=wrap,
    )
