"""Prompt weighting for CLIP text encoders: `(word:1.3)`, `(word)`, `[word]`, `\\(` escapes, `BREAK`, and
prompts longer than 77 tokens in 75-token chunks.

Lives here: `parse_weights`, `PromptChunk`, `chunk_tokens`, `apply_weights`, `WEIGHTINGS`, `strip_weights`,
`EMBEDDING_RE`.
May import: stdlib, torch.

`embedding:name` (ComfyUI's syntax) in a prompt stands for the vectors of a textual-inversion embedding;
`chunk_tokens` reserves one position per vector (never split across chunks) and records the vectors, which
clip_text.py writes over the token embeddings at those positions.

Syntax (A1111's `parse_prompt_attention`, which ComfyUI's parser follows for these cases):
`(text)` multiplies the weight by 1.1, `[text]` divides it by 1.1, `(text:1.3)` sets a factor of 1.3;
groups nest and multiply; `\\(`, `\\)`, `\\[`, `\\]` are literal brackets; an unclosed bracket applies to
the rest of the prompt; `BREAK` (capitals, between spaces) ends the current chunk.

Chunks: each chunk is BOS + up to 75 tokens + EOS, padded to 77 with the tokenizer's pad token, encoded
on its own, and the chunks' embeddings are concatenated along the sequence (77 * n tokens); the pooled
vector is the first chunk's. A prompt of at most 75 tokens with no weights and no BREAK gives exactly the
ids the plain tokenizer call gives, so its embeddings are the pipeline's bit for bit.

`weighting` chooses what a weight does to a token's embedding:
- "comfy" (ComfyUI, default): `z = (z - z_empty) * w + z_empty`, interpolating from the empty prompt's
  embedding at that position;
- "a1111": `z = z * w`, then the whole chunk is rescaled so its mean equals the unweighted mean.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch only when weights are applied: the Text Encode node lists WEIGHTINGS at import
    import torch

WEIGHTINGS = ("comfy", "a1111")
BREAK = "BREAK"

# A1111 modules/prompt_parser.py: the tokens the attention grammar is made of.
_RE_ATTENTION = re.compile(
    r"""
\\\(|\\\)|\\\[|\\]|\\\\|\\|\(|\[|:\s*([+-]?[.\d]+)\s*\)|\)|]|[^\\()\[\]:]+|:
""",
    re.X,
)
_RE_BREAK = re.compile(r"\s*\bBREAK\b\s*", re.S)
EMBEDDING_RE = re.compile(r"embedding:([\w.\-]+)")
_UP, _DOWN = 1.1, 1 / 1.1


def parse_weights(text: str) -> list[tuple[str, float]]:
    """Split a prompt into (text, weight) runs; a `BREAK` is the run ("BREAK", -1.0).

    >>> parse_weights("a (red:1.3) [circle] \\\\(x\\\\)")
    [('a ', 1.0), ('red', 1.3), (' ', 1.0), ('circle', 0.9090909090909091), (' (x)', 1.0)]
    """
    res: list[list] = []
    round_brackets: list[int] = []
    square_brackets: list[int] = []

    def multiply_range(start: int, multiplier: float) -> None:
        for p in range(start, len(res)):
            if res[p][0] != BREAK:  # a BREAK inside brackets stays a BREAK
                res[p][1] *= multiplier

    for m in _RE_ATTENTION.finditer(text):
        token, weight = m.group(0), m.group(1)
        if token.startswith("\\"):
            res.append([token[1:], 1.0])
        elif token == "(":
            round_brackets.append(len(res))
        elif token == "[":
            square_brackets.append(len(res))
        elif weight is not None and round_brackets:
            multiply_range(round_brackets.pop(), float(weight))
        elif token == ")" and round_brackets:
            multiply_range(round_brackets.pop(), _UP)
        elif token == "]" and square_brackets:
            multiply_range(square_brackets.pop(), _DOWN)
        else:
            parts = _RE_BREAK.split(token)
            for i, part in enumerate(parts):
                if i > 0:
                    res.append([BREAK, -1.0])
                res.append([part, 1.0])
    for pos in round_brackets:
        multiply_range(pos, _UP)
    for pos in square_brackets:
        multiply_range(pos, _DOWN)
    if not res:
        res = [["", 1.0]]
    # Merge neighbours of equal weight (A1111 does the same), and drop empty runs.
    merged: list[list] = []
    for run in res:
        if merged and merged[-1][1] == run[1] and run[0] != BREAK and merged[-1][0] != BREAK:
            merged[-1][0] += run[0]
        elif run[0] or not merged:
            merged.append(run)
    return [(t, float(w)) for t, w in merged]


def strip_weights(text: str) -> str:
    """The prompt's text without weighting syntax (for encoders that take plain text: T5).

    Text without brackets, backslashes or BREAK comes back unchanged, character for character.
    """
    if not any(c in text for c in "()[]\\") and BREAK not in text:
        return text
    return "".join(" " if t == BREAK else t for t, _ in parse_weights(text)).strip()


def has_weights(runs: list[tuple[str, float]]) -> bool:
    return any(w != 1.0 for _, w in runs)


@dataclass(frozen=True)
class PromptChunk:
    """77 token ids (BOS, tokens, EOS, padding) and one weight per position (1.0 on BOS/EOS/padding).

    `vectors`: (position, vector) for embedding positions, whose id is only a placeholder.
    """

    ids: list[int]
    weights: list[float]
    vectors: tuple[tuple[int, torch.Tensor], ...] = ()


def chunk_tokens(
    tokenizer, runs: list[tuple[str, float]], embedding: Callable[[str], torch.Tensor] | None = None
) -> list[PromptChunk]:
    """Tokenize weighted runs into 77-token chunks (BOS + 75 + EOS, padded), the way A1111 and ComfyUI do.

    A chunk ends after 75 tokens or at a BREAK. The tokenizer's BOS, EOS and pad ids come from the tokenizer
    itself (SDXL's second CLIP pads with "!", not EOS). `embedding(name)` gives the (n, D) vectors of
    `embedding:name`; without it the words are tokenized as text.
    """
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    room = tokenizer.model_max_length - 2
    # Per chunk: ids, weights, {position in chunk (after BOS): vector}
    chunks: list[tuple[list[int], list[float], dict[int, torch.Tensor]]] = [([], [], {})]

    def add(token: int, weight: float, vector: torch.Tensor | None = None) -> None:
        if len(chunks[-1][0]) == room:
            chunks.append(([], [], {}))
        ids, weights, vectors = chunks[-1]
        if vector is not None:
            vectors[len(ids) + 1] = vector
        ids.append(token)
        weights.append(weight)

    for text, weight in runs:
        if text == BREAK:
            chunks.append(([], [], {}))
            continue
        pieces = EMBEDDING_RE.split(text) if embedding is not None else [text]
        for i, piece in enumerate(pieces):
            if i % 2 == 1:  # an embedding name
                vectors = embedding(piece)  # type: ignore[misc]
                if len(vectors) > room:
                    raise ValueError(
                        f"embedding:{piece} has {len(vectors)} vectors; at most {room} fit a chunk"
                    )
                if len(chunks[-1][0]) + len(vectors) > room:
                    chunks.append(([], [], {}))  # never split an embedding across chunks
                for v in vectors:
                    add(bos, weight, v)  # BOS as the placeholder id: never taken for the EOS position
            elif piece:
                for token in tokenizer(piece, add_special_tokens=False, truncation=False).input_ids:
                    add(token, weight)
    out = []
    for ids, weights, vectors in chunks:
        fill = room - len(ids)
        out.append(
            PromptChunk(
                [bos, *ids, eos] + [pad] * fill,
                [1.0, *weights, 1.0] + [1.0] * fill,
                tuple(sorted(vectors.items(), key=lambda kv: kv[0])),
            )
        )
    return out


def empty_chunk(tokenizer) -> PromptChunk:
    return chunk_tokens(tokenizer, [("", 1.0)])[0]


def apply_weights(
    z: torch.Tensor, weights: torch.Tensor, weighting: str, z_empty: torch.Tensor | None = None
) -> torch.Tensor:
    """Weight one chunk's embeddings z (1, 77, D) by `weights` (77,). See the module docstring."""
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting {weighting!r} (expected one of {', '.join(WEIGHTINGS)})")
    if bool((weights == 1.0).all()):
        return z
    w = weights.to(device=z.device, dtype=z.dtype)[None, :, None]  # (1, 77, 1)
    if weighting == "comfy":
        assert z_empty is not None, "comfy weighting interpolates from the empty prompt's embedding"
        # Only the weighted positions: (z - e) * 1 + e is not bit-identical to z.
        import torch

        return torch.where(w != 1.0, (z - z_empty) * w + z_empty, z)
    original_mean = z.float().mean()
    z = z * w
    return z * (original_mean / z.float().mean()).to(z.dtype)
