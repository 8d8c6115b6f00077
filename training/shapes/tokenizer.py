"""Offline builder for the shapes model's CLIP tokenizer.

Trains a tiny BPE (``tokenizers`` library) over the caption vocabulary, writes it as CLIP-format
``vocab.json`` / ``merges.txt`` and wraps it in ``transformers.CLIPTokenizer`` so that diffusers'
``StableDiffusionPipeline`` loads it like any Stable Diffusion tokenizer, with no download.

May import only the standard library, ``tokenizers``, ``transformers`` and this package's ``scenes``.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import CLIPTokenizer
from transformers.convert_slow_tokenizer import bytes_to_unicode

from training.shapes.scenes import COLOURS, HELD_OUT, SHAPES, caption, vocabulary_words

BOS = "<|startoftext|>"
EOS = "<|endoftext|>"
# Long enough for every caption of the grammar plus the two special tokens, with room for a user's
# longer prompt to be truncated gracefully; short keeps cross-attention cheap.
MAX_LENGTH = 32


def _corpus() -> list[str]:
    # Every grammar word in several sentences, held-out triples included: the tokenizer must know the
    # words of the test prompts even though the image model never sees those combinations.
    lines = [caption(c, s, b) for c in COLOURS for s in SHAPES for b in COLOURS if c != b]
    lines += [caption(*t, "small", "left") for t in HELD_OUT]
    lines += [" ".join(vocabulary_words())] * 4
    return lines


def build_clip_tokenizer(out_dir: Path) -> CLIPTokenizer:
    """Train the BPE, write CLIP-format files and save a ``CLIPTokenizer`` into ``out_dir``."""
    bpe = Tokenizer(models.BPE(end_of_word_suffix="</w>"))
    bpe.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        min_frequency=1,
        special_tokens=[BOS, EOS],
        end_of_word_suffix="</w>",
        show_progress=False,
    )
    bpe.train_from_iterator(_corpus(), trainer=trainer)
    model = json.loads(bpe.to_str())["model"]
    vocab: dict[str, int] = dict(model["vocab"])
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]

    # Any byte, alone or word-final, gets an id, so an unexpected prompt degrades to characters, never unk.
    for char in bytes_to_unicode().values():
        for token in (char, char + "</w>"):
            if token not in vocab:
                vocab[token] = len(vocab)
    vocab = {tok: i for i, (tok, _) in enumerate(sorted(vocab.items(), key=lambda kv: kv[1]))}

    merge_pairs = [tuple(m.split(" ")) for m in merges]
    # transformers 5 builds CLIPTokenizer from in-memory vocab/merges (4.x took file paths instead).
    try:
        tokenizer = CLIPTokenizer(
            vocab=vocab,
            merges=merge_pairs,
            bos_token=BOS,
            eos_token=EOS,
            unk_token=EOS,
            pad_token=EOS,
            model_max_length=MAX_LENGTH,
        )
    except TypeError:  # pragma: no cover - transformers 4.x
        tokenizer = _legacy_tokenizer(vocab, merges)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(out_dir))
    # Also the classic CLIP file pair, so older transformers releases (slow tokenizer) load the folder too.
    (out_dir / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (out_dir / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
    return CLIPTokenizer.from_pretrained(str(out_dir))


def _legacy_tokenizer(vocab: dict[str, int], merges: list[str]) -> CLIPTokenizer:
    with tempfile.TemporaryDirectory() as tmp:
        vocab_file = Path(tmp) / "vocab.json"
        merges_file = Path(tmp) / "merges.txt"
        vocab_file.write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
        # CLIPTokenizer skips the first line of merges.txt as a version header.
        merges_file.write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
        return CLIPTokenizer(
            vocab_file=str(vocab_file),
            merges_file=str(merges_file),
            bos_token=BOS,
            eos_token=EOS,
            unk_token=EOS,
            pad_token=EOS,
            model_max_length=MAX_LENGTH,
        )


def check_tokenizer(tokenizer: CLIPTokenizer) -> None:
    """Raise if any grammar word is split or unknown (the model relies on one token per word)."""
    for word in vocabulary_words():
        ids = tokenizer(word, add_special_tokens=False)["input_ids"]
        if len(ids) != 1 or ids[0] == tokenizer.unk_token_id:
            raise ValueError(f"word {word!r} tokenizes to {ids}")
