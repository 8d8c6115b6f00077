"""Prompt weighting: the parsed runs for tricky prompts, 75-token chunks, BREAK, weight 1.0 = plain prompt,
the two weighting modes, and CLIP skip (ComfyUI's CLIPSetLastLayer) against diffusers' `clip_skip`."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from memory import MemoryConfig, MemoryManager
from pipelines.diffusion.conditioning import encode_prompt
from pipelines.diffusion.loading import load_model
from pipelines.diffusion.prompt_weights import (
    BREAK,
    apply_weights,
    chunk_tokens,
    parse_weights,
    strip_weights,
)

UP = 1.1

# (prompt, runs) as A1111's parse_prompt_attention gives them; ComfyUI's parser agrees on all of these.
TRICKY = [
    ("a red circle", [("a red circle", 1.0)]),
    ("a (red) circle", [("a ", 1.0), ("red", UP), (" circle", 1.0)]),
    ("a ((red)) circle", [("a ", 1.0), ("red", UP * UP), (" circle", 1.0)]),
    ("a [red] circle", [("a ", 1.0), ("red", 1 / UP), (" circle", 1.0)]),
    ("a (red:1.3) circle", [("a ", 1.0), ("red", 1.3), (" circle", 1.0)]),
    ("(red:0.5) (blue:-1)", [("red", 0.5), (" ", 1.0), ("blue", -1.0)]),
    ("(a (b:2) c)", [("a ", UP), ("b", 2 * UP), (" c", UP)]),
    (r"a \(red\) circle", [("a (red) circle", 1.0)]),
    (r"\[x\] and \\", [("[x] and \\", 1.0)]),
    ("open (bracket", [("open ", 1.0), ("bracket", UP)]),
    ("stray ) and ]", [("stray ) and ]", 1.0)]),
    ("time 10:30 (x:1.5)", [("time 10:30 ", 1.0), ("x", 1.5)]),
    ("cat BREAK dog", [("cat", 1.0), (BREAK, -1.0), ("dog", 1.0)]),
    ("(red BREAK blue)", [("red", UP), (BREAK, -1.0), ("blue", UP)]),
    ("", [("", 1.0)]),
]


@pytest.mark.parametrize(("prompt", "runs"), TRICKY)
def test_tricky_prompts_parse_like_a1111(prompt: str, runs: list[tuple[str, float]]) -> None:
    got = parse_weights(prompt)
    assert [t for t, _ in got] == [t for t, _ in runs]
    assert all(math.isclose(a, b) for (_, a), (_, b) in zip(got, runs, strict=True))


def test_plain_text_for_t5_drops_only_the_syntax() -> None:
    assert strip_weights("a small yellow triangle") == "a small yellow triangle"
    assert strip_weights("a (red:1.3) [circle] BREAK x") == "a red circle x"
    assert strip_weights(r"a \(literal\)") == "a (literal)"


@pytest.fixture(scope="module")
def sd():
    mm = MemoryManager(MemoryConfig(device="cpu", policy="auto"))
    yield mm, load_model(mm, "demo:tiny-sd")
    mm.close()


def test_chunks_are_75_tokens_with_bos_eos_and_break_starts_a_new_one(sd) -> None:
    _, model = sd
    tokenizer = model.text_encoder.tokenizers[0].load()
    words = " ".join(["red"] * 100)
    ids = tokenizer("red", add_special_tokens=False).input_ids
    per_word = len(ids)
    chunks = chunk_tokens(tokenizer, parse_weights(f"({words}:1.2)"))
    assert len(chunks) == math.ceil(100 * per_word / 75)
    for c in chunks:
        assert len(c.ids) == len(c.weights) == 77
        assert c.ids[0] == tokenizer.bos_token_id and tokenizer.eos_token_id in c.ids[1:]
    assert chunks[0].weights[1:76] == [1.2] * 75 and chunks[0].weights[0] == chunks[0].weights[76] == 1.0
    broken = chunk_tokens(tokenizer, parse_weights("red BREAK blue"))
    assert len(broken) == 2
    # Unweighted and short: exactly the ids of the plain tokenizer call the diffusers pipeline makes.
    plain = tokenizer("a red circle", padding="max_length", max_length=77, truncation=True).input_ids
    assert chunk_tokens(tokenizer, parse_weights("a red circle"))[0].ids == plain


@pytest.mark.parametrize("weighting", ["comfy", "a1111"])
def test_weight_one_equals_the_plain_prompt_bit_for_bit(sd, weighting: str) -> None:
    mm, model = sd
    plain = encode_prompt(mm, model.text_encoder, "a small red circle", weighting=weighting)
    ones = encode_prompt(mm, model.text_encoder, "a (small:1.0) red (circle:1)", weighting=weighting)
    assert torch.equal(plain.embeds, ones.embeds)


def test_weights_change_only_their_tokens_in_comfy_mode(sd) -> None:
    mm, model = sd
    tokenizer = model.text_encoder.tokenizers[0].load()
    plain = encode_prompt(mm, model.text_encoder, "a small red circle").embeds
    empty = encode_prompt(mm, model.text_encoder, "").embeds
    weighted = encode_prompt(mm, model.text_encoder, "a small (red:1.5) circle").embeds
    n_a_small = len(tokenizer("a small", add_special_tokens=False).input_ids)
    n_red = len(tokenizer("red", add_special_tokens=False).input_ids)
    red = slice(1 + n_a_small, 1 + n_a_small + n_red)
    expected = (plain[:, red] - empty[:, red]) * 1.5 + empty[:, red]
    # The same elementwise ops on the same embeddings (|x| <= ~3.4, ulp 2.4e-7): 1e-6 is ~4 ulps; seen: 0.
    assert torch.allclose(weighted[:, red], expected, atol=1e-6)
    others = torch.ones(77, dtype=torch.bool)
    others[red] = False
    assert torch.equal(weighted[:, others], plain[:, others])


def test_a1111_mode_keeps_the_mean() -> None:
    z = torch.randn(1, 77, 8) + 0.3
    w = torch.ones(77)
    w[3:6] = 1.4
    out = apply_weights(z, w, "a1111")
    assert torch.allclose(out.mean(), z.mean(), atol=1e-6)  # a mean of ~0.35 (ulp 3e-8): ~30 ulps
    assert not torch.allclose(out, z)


def test_long_prompts_make_more_tokens_and_sample_against_a_short_negative(sd) -> None:
    from pipelines.diffusion.denoising import sample
    from pipelines.diffusion.sampling import SamplerSettings
    from pipelines.diffusion.values import Latents

    mm, model = sd
    long = encode_prompt(mm, model.text_encoder, " ".join(["a small red circle"] * 30))
    assert long.embeds.shape[1] == 77 * 2 or long.embeds.shape[1] % 77 == 0 and long.embeds.shape[1] > 77
    short = encode_prompt(mm, model.text_encoder, "")
    latents = Latents(torch.zeros(1, 4, 8, 8), 8)
    out = sample(
        mm, model.denoiser, long, short, latents, SamplerSettings(scheduler="euler", steps=2, seed=1)
    )
    assert torch.isfinite(out.samples).all()


def test_clip_skip_matches_diffusers_clip_skip(sd) -> None:
    """Our -2 (ComfyUI's CLIPSetLastLayer) is diffusers' clip_skip=1: penultimate layer + final layer norm."""
    from diffusers import StableDiffusionPipeline

    from pipelines.diffusion.demo_models import ensure_demo_model

    mm, model = sd
    pipe = StableDiffusionPipeline.from_pretrained(str(ensure_demo_model("tiny-sd")), dtype=torch.float32)
    # diffusers' own `encode_prompt(clip_skip=1)` reaches for `text_encoder.text_model`, which transformers 5's
    # CLIPTextModel no longer has; these are the two lines it runs (pipeline_stable_diffusion.py).
    ids = pipe.tokenizer(
        "a red circle", padding="max_length", max_length=77, truncation=True, return_tensors="pt"
    )
    with torch.no_grad():
        out = pipe.text_encoder(ids.input_ids, output_hidden_states=True)
        theirs = pipe.text_encoder.final_layer_norm(out.hidden_states[-(1 + 1)])
    skipped = dataclasses.replace(model.text_encoder, clip_skip=-2)
    ours = encode_prompt(mm, skipped, "a red circle").embeds
    # The same layers on the same ids, as two calls (|x| <= ~2.8, ulp 2.4e-7): 1e-6 is ~4 ulps; seen: 0.
    assert torch.allclose(ours, theirs, atol=1e-6)
    last = encode_prompt(mm, dataclasses.replace(model.text_encoder, clip_skip=-1), "a red circle").embeds
    assert torch.equal(last, encode_prompt(mm, model.text_encoder, "a red circle").embeds)
    assert not torch.allclose(ours, last)


def _token_vectors(mm: MemoryManager, ref, index: int, words: str) -> torch.Tensor:
    tokenizer = ref.tokenizers[index].load()
    ids = tokenizer(words, add_special_tokens=False).input_ids
    with mm.use(ref.handles[index]) as te:
        return te.get_input_embeddings().weight[ids].detach().clone()


@pytest.mark.parametrize("name", ["tiny-sd", "tiny-sdxl"])
def test_an_embedding_of_the_words_own_vectors_equals_the_words(tmp_path, name: str) -> None:
    """A textual-inversion file whose vectors are the token embeddings of "red circle" must encode exactly
    like the words (SD1.x: one tensor; SDXL: clip_l and clip_g)."""
    from safetensors.torch import save_file

    mm = MemoryManager(MemoryConfig(device="cpu", policy="auto"))
    try:
        model = load_model(mm, f"demo:{name}")
        te = model.text_encoder
        if name == "tiny-sd":
            tensors = {"emb_params": _token_vectors(mm, te, 0, "red circle")}
        else:
            tensors = {
                "clip_l": _token_vectors(mm, te, 0, "red circle"),
                "clip_g": _token_vectors(mm, te, 1, "red circle"),
            }
        save_file(tensors, str(tmp_path / "redcircle.safetensors"))
        words = encode_prompt(mm, te, "a small red circle", embeddings_dir=tmp_path)
        embedded = encode_prompt(mm, te, "a small embedding:redcircle", embeddings_dir=tmp_path)
        assert torch.equal(words.embeds, embedded.embeds)
        if name == "tiny-sdxl":
            assert torch.equal(words.pooled, embedded.pooled)
        weighted = encode_prompt(mm, te, "a small (embedding:redcircle:1.4)", embeddings_dir=tmp_path)
        assert not torch.equal(weighted.embeds, words.embeds)
        with pytest.raises(FileNotFoundError, match="embedding:missing: no missing.safetensors"):
            encode_prompt(mm, te, "embedding:missing", embeddings_dir=tmp_path)
    finally:
        mm.close()
