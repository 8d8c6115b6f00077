"""LoRA: parity with diffusers' `load_lora_weights` + `fuse_lora`, strength 0, stacking, unload, policies.

LoRA files are built in the tests (tests/lora_fixtures.py) from the tiny demo models' own layers.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest
import torch
from diffusers import DiffusionPipeline, EulerDiscreteScheduler

from memory import MemoryConfig, MemoryManager
from pipelines.diffusion.conditioning import encode_prompt
from pipelines.diffusion.demo_models import ensure_demo_model
from pipelines.diffusion.denoising import sample
from pipelines.diffusion.lora import make_patch, use_denoiser, use_text_encoder
from pipelines.diffusion.lora_formats import read_lora
from pipelines.diffusion.sampling import SamplerSettings
from pipelines.diffusion.vae import decode
from pipelines.diffusion.values import Latents
from tests.lora_fixtures import (
    FLUX_LAYERS,
    SD3_LAYERS,
    TEXT_LAYERS,
    kohya_name,
    unet_layers,
    write_kohya,
    write_kohya_flux,
    write_peft,
)

# Integration: in `make test`, out of the fast lane (`make test-fast`).
pytestmark = pytest.mark.slow

PROMPT = "a small red circle"
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def pipes():
    """diffusers pipelines of the demo models, loaded fresh per call (fuse_lora changes them)."""

    def load(name: str) -> DiffusionPipeline:
        pipe = DiffusionPipeline.from_pretrained(str(ensure_demo_model(name)), dtype=torch.float32)
        if name not in ("tiny-flux", "tiny-sd3"):  # flow models keep their flow-matching Euler
            pipe.scheduler = EulerDiscreteScheduler.from_config(pipe.scheduler.config)
        pipe.set_progress_bar_config(disable=True)
        return pipe

    return load


def ours(
    name: str, loras: list[tuple[Path, float]], *, policy: str = "none", text_strength: float | None = None
) -> torch.Tensor:
    with_patches = MemoryManager(MemoryConfig(device="cpu", policy=policy))
    try:
        return _ours(with_patches, name, loras, text_strength)
    finally:
        with_patches.close()


def _ours(
    mm: MemoryManager, name: str, loras: list[tuple[Path, float]], text_strength: float | None
) -> torch.Tensor:
    from pipelines.diffusion.loading import load_model

    model = load_model(mm, f"demo:{name}")
    d_patches = tuple(make_patch(p, s) for p, s in loras)
    t_patches = tuple(make_patch(p, s if text_strength is None else text_strength) for p, s in loras)
    denoiser = dataclasses.replace(model.denoiser, patches=d_patches)
    text_encoder = dataclasses.replace(model.text_encoder, patches=t_patches)
    flux = name == "tiny-flux"
    positive = encode_prompt(mm, text_encoder, PROMPT)
    negative = None if flux else encode_prompt(mm, text_encoder, "")
    channels = model.vae.latent_channels
    latents = Latents(torch.zeros(1, channels, 8, 8), model.vae.scale_factor)
    settings = SamplerSettings(scheduler="euler", steps=3, cfg=4.0 if not flux else 3.5, seed=7)
    image = decode(mm, model.vae, sample(mm, denoiser, positive, negative, latents, settings))
    return image.permute(0, 3, 1, 2)


def theirs(pipe: DiffusionPipeline, loras: list[tuple[Path, float]], name: str) -> torch.Tensor:
    names = []
    for i, (path, _) in enumerate(loras):
        pipe.load_lora_weights(str(path), adapter_name=f"l{i}")
        names.append(f"l{i}")
    if names:
        pipe.set_adapters(names, adapter_weights=[s for _, s in loras])
        pipe.fuse_lora(adapter_names=names)
    extra = {} if name == "tiny-flux" else {"negative_prompt": ""}
    return pipe(
        PROMPT,
        height=64,
        width=64,
        num_inference_steps=3,
        guidance_scale=4.0 if name != "tiny-flux" else 3.5,
        generator=torch.Generator("cpu").manual_seed(7),
        output_type="pt",
        **extra,
    ).images


def _files(pipe: DiffusionPipeline, name: str, tmp_path: Path, layout: str, seed: int) -> Path:
    path = tmp_path / f"{name}-{layout}-{seed}.safetensors"
    if name == "tiny-flux" and layout == "kohya":
        return write_kohya_flux(path, pipe.transformer, seed=seed)
    if name == "tiny-sd3":
        return write_peft(path, {"transformer": pipe.transformer}, {"transformer": SD3_LAYERS}, seed=seed)
    if name == "tiny-flux":
        return write_peft(
            path,
            {"transformer": pipe.transformer, "text_encoder": pipe.text_encoder},
            {"transformer": FLUX_LAYERS, "text_encoder": TEXT_LAYERS},
            seed=seed,
        )
    tes = {"text_encoder": pipe.text_encoder}
    if name == "tiny-sdxl":
        tes["text_encoder_2"] = pipe.text_encoder_2
    if layout == "kohya":
        prefixes = {
            "text_encoder": "lora_te_" if name == "tiny-sd" else "lora_te1_",
            "text_encoder_2": "lora_te2_",
        }
        return write_kohya(path, pipe.unet, {prefixes[k]: m for k, m in tes.items()}, seed=seed)
    models = {"unet": pipe.unet, **tes}
    return write_peft(
        path, models, {k: unet_layers(pipe.unet) if k == "unet" else TEXT_LAYERS for k in models}, seed=seed
    )


@pytest.mark.parametrize(
    ("name", "layout"),
    [
        ("tiny-sd", "kohya"),
        ("tiny-sd", "peft"),
        ("tiny-sdxl", "kohya"),
        ("tiny-sdxl", "peft"),
        ("tiny-flux", "peft"),
        ("tiny-flux", "kohya"),
        ("tiny-sd3", "peft"),
    ],
)
def test_lora_matches_diffusers_fuse_lora(pipes, tmp_path, name: str, layout: str) -> None:
    pipe = pipes(name)
    lora = _files(pipe, name, tmp_path, layout, seed=1)
    base = ours(name, [])
    a = ours(name, [(lora, 0.7)])
    b = theirs(pipe, [(lora, 0.7)], name)
    diff = (a - b).abs().max().item()
    print(f"lora parity {name} {layout}: max abs diff {diff:.3g}, effect {(a - base).abs().max().item():.3g}")
    assert (a - base).abs().max().item() > 10 * TOLERANCE  # the LoRA does something
    assert diff <= TOLERANCE


def test_two_loras_stack_like_their_fused_sum(pipes, tmp_path) -> None:
    pipe = pipes("tiny-sd")
    first = _files(pipe, "tiny-sd", tmp_path, "kohya", seed=1)
    second = _files(pipe, "tiny-sd", tmp_path, "peft", seed=2)
    a = ours("tiny-sd", [(first, 0.7), (second, -0.5)])
    b = theirs(pipe, [(first, 0.7), (second, -0.5)], "tiny-sd")
    assert (a - b).abs().max().item() <= TOLERANCE


def test_strength_zero_is_no_lora_bit_for_bit(pipes, tmp_path) -> None:
    lora = _files(pipes("tiny-sd"), "tiny-sd", tmp_path, "kohya", seed=1)
    assert torch.equal(ours("tiny-sd", [(lora, 0.0)]), ours("tiny-sd", []))


def test_on_the_fly_equals_fused_and_the_report_says_which(pipes, tmp_path) -> None:
    lora = _files(pipes("tiny-sd"), "tiny-sd", tmp_path, "peft", seed=1)
    images, modes = {}, {}
    for policy in ("none", "sequential"):
        mm = MemoryManager(MemoryConfig(device="cpu", policy=policy))
        try:
            images[policy] = _ours(mm, "tiny-sd", [(lora, 0.8)], None)
            report = mm.report()
        finally:
            mm.close()
        modes[policy] = {e["mode"] for e in report["patches"] if e["component"] == "unet"}
        lora_rows = [r for r in report["ledger"] if r["kind"] == "lora"]
        assert len(lora_rows) == 1 and lora_rows[0]["weight_bytes"] == lora.stat().st_size - _header(lora)
    assert modes == {"none": {"fused"}, "sequential": {"on_the_fly"}}
    assert torch.equal(images["none"], images["sequential"])


def _header(path: Path) -> int:
    # A safetensors file: 8-byte length, JSON header, then the tensor bytes.
    return 8 + int.from_bytes(path.read_bytes()[:8], "little")


def _weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def test_fused_weights_are_base_plus_deltas_and_unload_restores_bit_for_bit(pipes, tmp_path) -> None:
    from pipelines.diffusion.loading import load_model

    pipe = pipes("tiny-sd")
    first = _files(pipe, "tiny-sd", tmp_path, "kohya", seed=1)
    second = _files(pipe, "tiny-sd", tmp_path, "peft", seed=2)
    mm = MemoryManager(MemoryConfig(device="cpu", policy="auto"))
    try:
        model = load_model(mm, "demo:tiny-sd")
        with mm.use(model.denoiser.handle) as unet:
            original = _weights(unet)
        stacked = dataclasses.replace(
            model.denoiser, patches=(make_patch(first, 0.7), make_patch(second, -0.5))
        )
        with use_denoiser(mm, stacked) as unet:
            patched = _weights(unet)
        deltas = [read_lora(p, "sd").targets["denoiser"] for p in (first, second)]
        for layer in unet_layers(pipe.unet):
            w = original[f"{layer}.weight"]
            expected = w + 0.7 * deltas[0][layer].delta(w.shape) - 0.5 * deltas[1][layer].delta(w.shape)
            # w + sum of scaled deltas in another order: each term rounds once at |w| <= ~0.33 (ulp 3e-8);
            # 1e-6 is ~30 ulps, seen 3e-8. A wrong scale or a missing delta moves weights by 1e-3 and more.
            assert torch.allclose(patched[f"{layer}.weight"], expected, atol=1e-6, rtol=0)
        untouched = [
            k for k in original if not any(k.startswith(layer + ".") for layer in unet_layers(pipe.unet))
        ]
        assert all(torch.equal(original[k], patched[k]) for k in untouched)
        with use_denoiser(mm, model.denoiser) as unet:  # the same model without LoRA: patches come off
            restored = _weights(unet)
        assert all(torch.equal(original[k], restored[k]) for k in original)
        # Neither the removal nor the patching reloaded the UNet from disk.
        assert [e.component for e in mm.telemetry.events() if type(e).__name__ == "LoadEvent"].count(
            "unet"
        ) == 1
    finally:
        mm.close()


def test_kohya_text_attention_and_loha_are_applied(pipes, tmp_path) -> None:
    """Layouts diffusers' loader leaves out here: kohya CLIP attention keys (its `to_q_lora` rename doesn't
    reach transformers 5's CLIP) and LyCORIS LoHa; checked against the weights they define."""
    from pipelines.diffusion.loading import load_model

    pipe = pipes("tiny-sd")
    q = "encoder.layers.0.self_attn.q_proj"
    gen = torch.Generator().manual_seed(3)
    te_file = tmp_path / "te.safetensors"
    from safetensors.torch import save_file

    name = kohya_name("lora_te_", q)
    down, up = torch.randn(2, 32, generator=gen), torch.randn(32, 2, generator=gen)
    save_file(
        {f"{name}.lora_down.weight": down, f"{name}.lora_up.weight": up, f"{name}.alpha": torch.tensor(1.0)},
        str(te_file),
    )
    loha = write_kohya(
        tmp_path / "loha.safetensors", pipe.unet, {"lora_te_": pipe.text_encoder}, seed=4, loha=True
    )
    mm = MemoryManager(MemoryConfig(device="cpu", policy="auto"))
    try:
        model = load_model(mm, "demo:tiny-sd")
        with mm.use(model.text_encoder.handles[0]) as te:
            w = te.get_submodule(q).weight.detach().clone()
        ref = dataclasses.replace(model.text_encoder, patches=(make_patch(te_file, 1.5),))
        with use_text_encoder(mm, ref, 0) as te:
            # Tolerance: one matmul and one add rounded in another order, |w| < 5 here; seen: 0.
            assert torch.allclose(te.get_submodule(q).weight, w + 1.5 * (up @ down) / 2, atol=1e-6, rtol=0)
        layer = unet_layers(pipe.unet)[0]
        with mm.use(model.denoiser.handle) as unet:
            w = unet.get_submodule(layer).weight.detach().clone()
        lo = read_lora(loha, "sd").targets["denoiser"][layer]
        f = lo.factors
        expected = w + (f["w1a"] @ f["w1b"]) * (f["w2a"] @ f["w2b"]) * (2.0 / 4)
        with use_denoiser(mm, dataclasses.replace(model.denoiser, patches=(make_patch(loha, 1.0),))) as unet:
            assert torch.allclose(unet.get_submodule(layer).weight, expected, atol=1e-6, rtol=0)
    finally:
        mm.close()


def test_a_file_for_another_model_is_refused_with_a_sample_and_a_partial_one_warns(
    pipes, tmp_path, caplog
) -> None:
    from safetensors.torch import save_file

    from pipelines.diffusion.loading import load_model
    from pipelines.diffusion.lora import check_lora

    mm = MemoryManager(MemoryConfig(device="cpu", policy="auto"))
    model = load_model(mm, "demo:tiny-sd")
    mm.close()
    alien = tmp_path / "alien.safetensors"
    save_file(
        {"lora_unet_nowhere_block_to_q.lora_down.weight": torch.zeros(2, 4), "weird.key": torch.zeros(1)},
        str(alien),
    )
    with pytest.raises(ValueError, match=r"alien\.safetensors: no LoRA layer .*e\.g\. .*weird\.key"):
        check_lora(alien, model.denoiser, model.text_encoder)
    partial = tmp_path / "partial.safetensors"
    pipe = pipes("tiny-sd")
    write_kohya(partial, pipe.unet, {}, seed=1)
    from safetensors.torch import load_file

    sd = load_file(str(partial))
    sd["lora_unet_not_a_layer.lora_down.weight"] = torch.zeros(2, 4)
    sd["lora_unet_not_a_layer.lora_up.weight"] = torch.zeros(4, 2)
    save_file(sd, str(partial))
    with caplog.at_level(logging.WARNING):
        ours("tiny-sd", [(partial, 1.0)])
    assert f"{len(unet_layers(pipe.unet))} layers applied, 1 not" in caplog.text


def test_the_check_reads_the_denoisers_headers_and_asks_the_model_only_about_what_they_leave(
    pipes, tmp_path, monkeypatch
) -> None:
    # A plan runs LoadLoRA's check: building the denoiser on the meta device imports diffusers' model code,
    # seconds of `app plan`. A matching file is answered from the safetensors headers alone; a key they do
    # not find is asked of the model itself before it is called stray (headers may name modules otherwise).
    from safetensors.torch import load_file, save_file

    import pipelines.diffusion.lora as lora_module
    from pipelines.diffusion.loading import load_model

    mm = MemoryManager(MemoryConfig(device="cpu", policy="auto"))
    model = load_model(mm, "demo:tiny-sd")
    mm.close()
    pipe = pipes("tiny-sd")
    matching = tmp_path / "matching.safetensors"
    write_kohya(matching, pipe.unet, {}, seed=1)
    built: list[str] = []
    real = lora_module._denoiser_layers

    def counting(ref):  # noqa: ANN001, ANN202 (a stand-in for the private function)
        built.append("meta model")
        return real(ref)

    monkeypatch.setattr(lora_module, "_denoiser_layers", counting)
    _, applied, stray = lora_module.check_lora(matching, model.denoiser, model.text_encoder)
    assert (applied, stray, built) == (len(unet_layers(pipe.unet)), [], [])

    partial = tmp_path / "partial.safetensors"
    sd = load_file(str(matching))
    sd["lora_unet_not_a_layer.lora_down.weight"] = torch.zeros(2, 4)
    sd["lora_unet_not_a_layer.lora_up.weight"] = torch.zeros(4, 2)
    save_file(sd, str(partial))
    _, applied, stray = lora_module.check_lora(partial, model.denoiser, model.text_encoder)
    assert built == ["meta model"]
    assert applied == len(unet_layers(pipe.unet)) and stray == [
        "denoiser:not.a.layer"
    ]  # as kohya names convert
