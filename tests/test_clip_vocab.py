"""The shipped CLIP vocabulary gives real SD checkpoints their tokenizer offline, with the usual ids."""

from __future__ import annotations

from pipelines.diffusion.single_file import SHIPPED_BPE, clip_tokenizer_from_bpe


def test_the_shipped_vocabulary_tokenizes_like_openai_clip() -> None:
    assert SHIPPED_BPE.exists()
    tokenizer = clip_tokenizer_from_bpe(SHIPPED_BPE)
    # Ids of openai/clip-vit-large-patch14 for "a photo of a cat" (start, a, photo, of, a, cat, end).
    assert tokenizer("a photo of a cat").input_ids == [49406, 320, 1125, 539, 320, 2368, 49407]
    assert len(tokenizer) == 49408
    padded = tokenizer("a cat", padding="max_length", max_length=77).input_ids
    assert len(padded) == 77 and padded[-1] == tokenizer.pad_token_id == 49407
