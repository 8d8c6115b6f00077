"""Prompts to token ids: plain text, or a chat turn through the model's own chat template.

Lives here: `build_prompt_ids`, `parse_stop_strings`. Imports transformers' tokenizer base type only.
"""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase


def has_chat_template(tokenizer: PreTrainedTokenizerBase) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def chat_text(tokenizer: PreTrainedTokenizerBase, prompt: str, system_prompt: str = "") -> str:
    """The templated text for one user turn, ending with the assistant's opening.

    With an empty system prompt no system message is sent, so a template's own default applies
    (SmolLM2's: "You are a helpful AI assistant named SmolLM...").
    """
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    messages.append({"role": "user", "content": prompt})
    return str(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))


def build_prompt_ids(
    tokenizer: PreTrainedTokenizerBase, prompt: str, *, system_prompt: str = "", chat: bool = True
) -> list[int]:
    """Token ids to prefill. `chat` uses the chat template when the model has one."""
    if chat and has_chat_template(tokenizer):
        # The template already writes every special token; the tokenizer must add none of its own.
        return list(
            tokenizer(chat_text(tokenizer, prompt, system_prompt), add_special_tokens=False)["input_ids"]
        )
    text = f"{system_prompt}\n\n{prompt}" if system_prompt else prompt
    return list(tokenizer(text, add_special_tokens=True)["input_ids"])


def parse_stop_strings(value: str) -> tuple[str, ...]:
    """A node parameter "a|b" or one per line -> ("a", "b"); `\\n` written out means a newline."""
    if not value:
        return ()
    parts = value.splitlines() if "\n" in value else value.split("|")
    return tuple(p.replace("\\n", "\n") for p in parts if p)
