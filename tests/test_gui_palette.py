"""The palette finds nodes by the ComfyUI class names users bring, and good matches push weak ones out."""

from __future__ import annotations

from app.gui.palette import NodePalette
from nodes.comfy.export import EXPORTERS


def types(palette: NodePalette, query: str) -> list[str]:
    return [spec.type for spec in palette.matches(query)]


def test_comfyui_class_names_find_our_node_first(qtbot, registry) -> None:
    palette = NodePalette(registry)
    qtbot.addWidget(palette)
    # The exporter's table is the ComfyUI <-> Nodeloom mapping: each class name leads to its node.
    pairs = [(out.class_type, ours) for ours, out in EXPORTERS.items() if hasattr(out, "class_type")]
    shared = {c for c, _ in pairs if sum(c == other for other, _ in pairs) > 1}  # Int and Seed: PrimitiveInt
    pairs = [(c, ours) for c, ours in pairs if c not in shared]
    assert len(pairs) > 10
    for class_type, ours in pairs:
        assert types(palette, class_type)[:1] == [ours], class_type
    for class_type, ours in [
        ("CheckpointLoaderSimple", "LoadDiffusionModel"),
        ("CLIPTextEncode", "TextEncode"),
        ("LoraLoader", "LoadLoRA"),
        ("DualCLIPLoader", "LoadTextEncoder"),
        ("img2img", "LoadImage"),
    ]:
        assert types(palette, class_type)[:1] == [ours], class_type
    assert "VAEEncode" in types(palette, "img2img")


def test_good_matches_drop_the_scattered_letter_ones(qtbot, registry) -> None:
    palette = NodePalette(registry)
    qtbot.addWidget(palette)
    assert set(types(palette, "llm")) == {"LoadLLM", "LLMGenerate"}  # no Load Upscale Model
    assert types(palette, "seed") == ["Seed"]  # no Text Encode, VAE Decode
    assert len(types(palette, "note")) <= 1  # was 8 unrelated nodes
    assert types(palette, "save")[:2] == ["SaveImage", "SaveText"]
    assert types(palette, "frmt txt")[:1] == ["FormatText"]  # letters in order still work alone
