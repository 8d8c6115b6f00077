"""Tiny random checkpoints of the LLM families as HF folders (no tests here): Llama 3, Qwen2.5, Qwen3, Gemma 3,
Mistral, each with a byte-level BPE tokenizer built offline and its family's chat-template shape.

Lives here: `FAMILIES`, `tiny_family_model`, `write_family_folder`. Imports transformers, tokenizers, torch and
`tests.llm_fixtures` (the byte-level token list). Folders are written into the test's tmp dir, never committed.

The chat templates are the families' shipped ones cut to what a single user/system turn exercises (role
headers, end-of-turn tokens, the generation prompt, Gemma's system-into-user folding, Mistral's [INST]); the
tool-calling and thinking branches of the real ones are left out.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from tests.llm_fixtures import MERGES, _byte_chars

_CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
_LLAMA3 = (
    "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
_GEMMA3 = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set first = messages[0]['content'] + '\n\n' %}"
    "{% set loop_messages = messages[1:] %}{% else %}{% set first = '' %}{% set loop_messages = messages %}"
    "{% endif %}{% for message in loop_messages %}{% set role = 'model' if message['role'] == 'assistant' "
    "else message['role'] %}{{ '<start_of_turn>' + role + '\n' + (first if loop.first else '') + "
    "message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)
_MISTRAL = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set sys = messages[0]['content'] + '\n\n' %}"
    "{% set loop_messages = messages[1:] %}{% else %}{% set sys = '' %}{% set loop_messages = messages %}"
    "{% endif %}{% for message in loop_messages %}{% if message['role'] == 'user' %}"
    "{{ '[INST] ' + (sys if loop.first else '') + message['content'] + ' [/INST]' }}"
    "{% else %}{{ message['content'] + eos_token }}{% endif %}{% endfor %}"
)

# family -> (config class, model class, specials (bos, eos/end-of-turn, pad and the rest), template, extra config)
FAMILIES: dict[str, tuple[type, type, list[str], str, dict]] = {
    "llama3": (
        LlamaConfig,
        LlamaForCausalLM,
        [
            "<|begin_of_text|>",
            "<|eot_id|>",
            "<|finetune_right_pad_id|>",
            "<|start_header_id|>",
            "<|end_header_id|>",
        ],
        _LLAMA3,
        {"rope_theta": 500000.0},
    ),
    "qwen2.5": (
        Qwen2Config,
        Qwen2ForCausalLM,
        ["<|endoftext|>", "<|im_end|>", "<|endoftext|>", "<|im_start|>"],
        _CHATML,
        {},
    ),
    "qwen3": (
        Qwen3Config,
        Qwen3ForCausalLM,
        ["<|endoftext|>", "<|im_end|>", "<|endoftext|>", "<|im_start|>"],
        _CHATML,
        {"head_dim": 16},
    ),
    "gemma3": (
        Gemma3TextConfig,
        Gemma3ForCausalLM,
        ["<bos>", "<end_of_turn>", "<pad>", "<start_of_turn>"],
        _GEMMA3,
        # layer 0 local (a 4-token window, shorter than the prompts, so the window matters), layer 1 global
        # query_pre_attn_scalar = head_dim, as in Gemma 3 1B-12B and as llama.cpp assumes for a GGUF
        {
            "head_dim": 16,
            "sliding_window": 4,
            "layer_types": ["sliding_attention", "full_attention"],
            "query_pre_attn_scalar": 16,
        },
    ),
    "mistral": (
        MistralConfig,
        MistralForCausalLM,
        ["<s>", "</s>", "<unk>", "[INST]", "[/INST]"],
        _MISTRAL,
        {"head_dim": 16},
    ),
}


def family_tokens(family: str) -> list[str]:
    specials = list(dict.fromkeys(FAMILIES[family][2]))
    return specials + _byte_chars() + ["".join(m.split(" ")) for m in MERGES]


def family_tokenizer(family: str) -> PreTrainedTokenizerFast:
    """A byte-level BPE over the family's specials, the 256 byte symbols and a few merges."""
    tokens = family_tokens(family)
    vocab = {t: i for i, t in enumerate(tokens)}
    merges = [tuple(m.split(" ")) for m in MERGES]
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    specials = FAMILIES[family][2]
    backend.add_special_tokens(list(dict.fromkeys(specials)))
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=specials[0],
        eos_token=specials[1],
        pad_token=specials[2],
        chat_template=FAMILIES[family][3],
    )


def tiny_family_model(family: str, seed: int = 0) -> PreTrainedModel:
    """A random 2-layer model of `family` (4 heads, 2 kv heads), weights larger than the init so greedy
    picks are not near-ties."""
    config_class, model_class, specials, _, extra = FAMILIES[family]
    tokens = family_tokens(family)
    torch.manual_seed(seed)
    config = config_class(
        vocab_size=len(tokens),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rms_norm_eps=1e-6,
        # Gemma 3 ships tied, but Gemma scales the embedding by sqrt(hidden): at these weight sizes the token's own
        # tied row then outweighs every layer and the greedy answer repeats one token, a weak parity check.
        tie_word_embeddings=family == "qwen3",
        bos_token_id=tokens.index(specials[0]),
        eos_token_id=tokens.index(specials[1]),
        pad_token_id=tokens.index(specials[2]),
        **extra,
    )
    model = model_class(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.3)
            else:  # norms and biases: off their init so (1 + w) vs w, and the q/k norms, matter
                p.add_(torch.randn_like(p) * 0.1)
    return model


def write_family_folder(family: str, folder: Path, seed: int = 0) -> PreTrainedModel:
    """Save the tiny model (safetensors), its generation config and tokenizer into `folder`; returns the model."""
    model = tiny_family_model(family, seed)
    model.save_pretrained(folder)
    family_tokenizer(family).save_pretrained(folder)
    return model
