"""Bounds on text work: prompts cut or refused before tokenising, and safe format templates.

Lives here: `limit_diffusion_prompt`, `check_llm_prompt`, `template_problem`, `format_template`, and the
limits. Imports only the standard library.

Tokenisers are linear but slow in Python-facing paths (a 3.5 M-character prompt took 183 s), and a format
width like `{a:>200000000}` allocates whatever it says. Nothing a workflow holds may ask for unbounded
work: these limits are far above any real use and are said in the message when they bite.
"""

from __future__ import annotations

import re
import string

# A CLIP text encoder reads 77 tokens (~300 characters), T5 at most 512; long-prompt chunking a few times
# that. Beyond this nothing can reach the model, so it is cut before tokenising.
DIFFUSION_PROMPT_CHARS = 20_000
# A token is ~4 characters of text; 8 per token of context is a generous ceiling for a prompt that fits.
LLM_CHARS_PER_TOKEN = 8
MAX_FORMAT_WIDTH = 10_000  # a width or precision in a format spec
MAX_FORMAT_OUTPUT = 16 * 2**20  # characters a FormatText may produce
_FIELDS = ("a", "b", "c")


def limit_diffusion_prompt(text: str) -> tuple[str, str | None]:
    """The prompt cut to `DIFFUSION_PROMPT_CHARS`, and a sentence saying what was cut (None if nothing)."""
    if len(text) <= DIFFUSION_PROMPT_CHARS:
        return text, None
    note = (
        f"the prompt has {len(text):,} characters; only the first {DIFFUSION_PROMPT_CHARS:,} were kept "
        f"({len(text) - DIFFUSION_PROMPT_CHARS:,} cut before tokenising: the text encoder reads far fewer)"
    )
    return text[:DIFFUSION_PROMPT_CHARS], note


def check_llm_prompt(prompt: str, context_tokens: int, model: str) -> None:
    """Refuse, before tokenising, a prompt too long for any context the model has."""
    if context_tokens <= 0:
        context_tokens = 131_072
    limit = context_tokens * LLM_CHARS_PER_TOKEN
    if len(prompt) > limit:
        raise ValueError(
            f"field 'prompt': {len(prompt):,} characters cannot fit {model}'s context of {context_tokens:,} "
            f"tokens (at most ~{limit:,} characters); shorten the prompt"
        )


def template_problem(template: object) -> str | None:
    """Why a FormatText template cannot be used, or None (checked at validation and when run)."""
    if not isinstance(template, str):
        return None
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        return f"not a valid template: {exc}"
    for _, name, spec, _ in parsed:
        if name is None:
            continue
        if name not in _FIELDS:
            shown = name if len(name) <= 40 else f"{name[:40]}…"
            return f"the template uses {{{shown}}}; only {{a}}, {{b}} and {{c}} are available"
        if spec and ("{" in spec or "}" in spec):
            return "nested fields inside a format spec are not supported"
        big = max((int(n) for n in re.findall(r"\d+", spec or "")), default=0)
        if big > MAX_FORMAT_WIDTH:
            return f"a width or precision of {big:,} is over the limit of {MAX_FORMAT_WIDTH:,}"
    return None


def format_template(template: str, fields: dict[str, str]) -> str:
    """`template.format(**fields)` once the template is checked and the result's size is bounded."""
    problem = template_problem(template)
    if problem is not None:
        raise ValueError(f"field 'template': {problem}")
    size = 0
    for literal, name, spec, _ in string.Formatter().parse(template):
        size += len(literal)
        if name is not None:
            width = max((int(n) for n in re.findall(r"\d+", spec or "")), default=0)
            size += max(len(fields[name]), width)
    if size > MAX_FORMAT_OUTPUT:
        raise ValueError(
            f"field 'template': the text would be ~{size:,} characters, over the limit of {MAX_FORMAT_OUTPUT:,}"
        )
    return template.format(**fields)
