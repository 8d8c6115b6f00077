"""ComfyUI's LTX-2 templates (the `comfyui-workflow-templates-json` package) import with no unsupported LTX-2
node, are family ltx2 (LTX-Video 0.9 stays refused), and their schedules and guiders map onto real values: the
ManualSigmas lists feed the samplers' `sigmas`, CFGGuider / LTXVDualCFGGuider become LTX-2 Guidance nodes."""

from __future__ import annotations

import json

import pytest

from nodes.comfy.sources import check_comfy, import_comfy_data
from nodes.registry import default_registry

templates = pytest.importorskip(
    "comfyui_workflow_templates_json", reason="pip install comfyui-workflow-templates-json"
)

from benchmarks.comfy_templates import open_weight_usage, templates_folder  # noqa: E402

# ComfyUI classes this issue maps; none may be left unsupported in an LTX-2 template.
MAPPED = {
    "ManualSigmas",
    "SamplerCustomAdvanced",
    "CFGGuider",
    "LTXVDualCFGGuider",
    "LTXVConditioning",
    "EmptyLTXVLatentVideo",
    "LTXVConcatAVLatent",
    "LTXVSeparateAVLatent",
    "LTXVAudioVAEDecode",
    "LTXVEmptyLatentAudio",
    "LTXVPreprocess",
    "LTXVImgToVideoInplace",
    "LTXVAudioVAELoader",
    "LTXAVTextEncoderLoader",
    "TextGenerateLTX2Prompt",
    "LatentUpscaleModelLoader",
    "LTXVLatentUpsampler",
    "LTXVScheduler",
}


@pytest.fixture(scope="module")
def registry():
    return default_registry(entry_point_packs=False)


def _import(name: str, registry):
    data = json.loads((templates_folder() / f"{name}.json").read_text(encoding="utf-8"))
    return import_comfy_data(data, registry, name, title=name)


def _ltx2_names() -> list[str]:
    return sorted(n for n in open_weight_usage(templates_folder()) if "ltx2" in n)


# (The LTX-2.5 templates are reported as a family not run here since session 5: their Gemma 4 text encoder,
# tests/test_comfy_ltx25_family.py.)
@pytest.mark.parametrize("name", ["video_ltx2_3_t2v"])
def test_the_most_used_ltx2_templates_import_and_pass_the_check(registry, name: str) -> None:
    result = _import(name, registry)
    assert result.unsupported == [] and result.families == []
    assert check_comfy(result, registry, name) == []  # no models folder given: names are not checked


def test_ltx2_3_i2v_imports_and_checks_clean_its_preview_showing_the_prompt(registry) -> None:
    # Its switch is off: PreviewAny shows a constant, the prompt itself, as ComfyUI shows it in the node.
    result = _import("video_ltx2_3_i2v", registry)
    assert result.unsupported == [] and result.families == []
    assert check_comfy(result, registry, "video_ltx2_3_i2v") == []
    nodes = result.workflow["nodes"]
    source = nodes["preview_any"]["inputs"]["text"][0]
    shown = nodes[source]["params"]["text"]
    prompts = [
        n["params"]["text"] for n in nodes.values() if n["type"] == "TextEncode" and "text" in n["params"]
    ]
    assert shown.startswith("Egyptian royal") and shown in prompts, (shown[:40], [p[:40] for p in prompts])
    ui = result.workflow["ui"]["nodes"]  # the added Text sits left of its preview in the editor
    assert (
        ui[source]["pos"][0] < ui["preview_any"]["pos"][0]
        and ui[source]["pos"][1] == ui["preview_any"]["pos"][1]
    )


@pytest.mark.slow  # imports every LTX-2 template (~0.6 s)
def test_no_ltx2_template_is_blocked_by_a_mapped_node_or_its_family(registry) -> None:
    names = _ltx2_names()
    assert len(names) >= 10  # video_ltx2_3_i2v, video_ltx2_5_i2v, ... (the package's LTX-2 templates)
    for name in names:
        result = _import(name, registry)
        # LTX-2.5's Gemma 4 text encoder is reported since session 5 (tests/test_comfy_ltx25_family.py).
        other = [f.message for f in result.families if f.family != "ltx2_5"]
        assert other == [], (name, other)
        left = {u.class_type for u in result.unsupported} & MAPPED
        # SamplerCustomAdvanced stays refused only where a part is one not mapped (DisableNoise with a list,
        # SamplerEulerAncestral: named in the reason).
        if left == {"SamplerCustomAdvanced"}:
            reasons = [u.reason for u in result.unsupported if u.class_type == "SamplerCustomAdvanced"]
            assert all(r.startswith("not mapped: its ") for r in reasons), (name, reasons)
            continue
        assert left == set(), (name, left)


def test_ltx_video_0_9_stays_a_family_nodeloom_does_not_run(registry) -> None:
    result = _import("ltxv_image_to_video", registry)
    assert {f.family for f in result.families} == {"ltxv"}


def test_manual_sigmas_and_guiders_map_onto_the_samplers(registry) -> None:
    nodes = _import("video_ltx2_5_i2v", registry).workflow["nodes"]
    samplers = [data for data in nodes.values() if data["type"] == "Sampler"]
    assert len(samplers) == 2  # the two stages
    lists = set()
    for sampler in samplers:
        sigmas = nodes[sampler["inputs"]["sigmas"][0]]
        assert sigmas["type"] == "ManualSigmas"
        lists.add(sigmas["params"]["sigmas"])
        count = len(sigmas["params"]["sigmas"].split(","))
        assert sampler["params"]["steps"] == count - 1
        guidance = nodes[sampler["inputs"]["denoiser"][0]]
        assert guidance["type"] == "LTX2Guidance"
        # LTXVDualCFGGuider [1, 1]: CFG 1 on video (the sampler's cfg) and on sound, no other term
        assert sampler["params"]["cfg"] == 1 and guidance["params"]["audio_cfg"] == 1
        assert guidance["params"]["stg_scale"] == 0 and guidance["params"]["modality_scale"] == 1
        assert nodes[guidance["inputs"]["denoiser"][0]]["type"] == "LoadDenoiser"
    assert lists == {
        "1.0, 0.99375, 0.9875, 0.98125, 0.975, 0.909375, 0.725, 0.421875, 0.0",
        "0.85, 0.7250, 0.4219, 0.0",
    }


def test_the_av_latent_is_built_split_and_decoded_as_in_the_template(registry) -> None:
    nodes = _import("video_ltx2_5_t2v", registry).workflow["nodes"]
    types = {data["type"] for data in nodes.values()}
    assert {
        "EmptyLTXVLatentVideo",
        "LTXVEmptyLatentAudio",
        "LTXVConcatAVLatent",
        "LTXVSeparateAVLatent",
    } <= types
    assert {"LTXVLatentUpsampler", "LoadLatentUpsampler", "LTXVAudioVAEDecode", "LTXVDecodeFrames"} <= types
    (empty,) = [d for d in nodes.values() if d["type"] == "EmptyLTXVLatentVideo"]
    assert nodes[empty["inputs"]["vae"][0]]["params"]["path"] == "ltx-2.5-video-vae-bf16.safetensors"
    assert "fps" in empty["inputs"] or empty["params"]["fps"] == 24  # the LTXVConditioning rate
    loaders = [d for d in nodes.values() if d["type"] in ("LoadTextEncoder", "LoadVAE", "LoadDenoiser")]
    assert {d["params"].get("family") for d in loaders} == {"ltx2"}
