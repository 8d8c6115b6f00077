"""A node type is one typed declaration: one new field reaches every consumer, and derived types stay derived.

The consumers of a parameter are the CLI (`--set`), sweeps (`--sweep`), the inspector (a widget with the
declared bounds), ComfyUI export and import (the declared widget name) and the settings object the node
builds (SamplerSettings). None of them is edited here: only the field is added.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QPointF
from PySide6.QtWidgets import QDoubleSpinBox

from app.cli import apply_overrides, parse_set
from nodes import kinds
from nodes.comfy.export import export_api
from nodes.comfy.node_types import SamplerAdvanced
from nodes.comfy.sources import import_comfy
from nodes.declare import node_type, param, settings_from
from nodes.diffusion import Sampler
from nodes.registry import NodeRegistry, default_registry
from nodes.spec import NodeSpec, Output, Param
from nodes.sweep import SweepError, parse_axis
from nodes.types import INT
from nodes.workflow import workflow_from_dict
from pipelines.diffusion.sampling import SamplerSettings
from tests.gui_support import make_window

TXT2IMG = Path(__file__).resolve().parents[1] / "resources" / "workflows" / "txt2img.json"


@node_type("Sampler", title="Sampler", category="diffusion", tags=("KSampler",), outputs=Sampler.spec.outputs)
class SamplerWithEta(Sampler):
    # The one edit: a new field with its kind, default, bounds, help and ComfyUI widget name.
    eta: float = param(kinds.FLOAT, 0.0, min=0.0, max=1.0, step=0.05, help="DDIM's eta", comfy="eta")


@pytest.fixture
def eta_registry() -> NodeRegistry:
    registry = default_registry(entry_point_packs=False)
    registry.register(SamplerWithEta.spec, replace=True)
    return registry


def _txt2img(registry: NodeRegistry) -> Any:
    return workflow_from_dict(json.loads(TXT2IMG.read_text()), registry)


def test_a_new_field_is_set_and_swept_from_the_command_line(eta_registry: NodeRegistry) -> None:
    wf = _txt2img(eta_registry)
    overrides, errors = parse_set(["sampler.eta=0.3"])
    assert errors == [] and apply_overrides(wf, overrides, eta_registry) == []
    assert wf.nodes["sampler"].params["eta"] == 0.3  # parsed as the float the kind holds

    axis = parse_axis("sampler.eta=0..1:0.5", wf, eta_registry)
    assert axis.values == (0.0, 0.5, 1.0)
    with pytest.raises(SweepError, match=r"above the maximum 1"):
        parse_axis("sampler.eta=0.5,2", wf, eta_registry)


def test_a_new_field_gets_its_widget_in_the_inspector(
    qtbot, tmp_path: Path, eta_registry: NodeRegistry
) -> None:
    window = make_window(qtbot, tmp_path, eta_registry)
    node = window.scene.add_node("Sampler", QPointF(0, 0))
    spin = window.inspector.editors["eta"].editor
    assert isinstance(spin, QDoubleSpinBox)
    assert (spin.minimum(), spin.maximum(), spin.singleStep()) == (0.0, 1.0, 0.05)
    assert spin.toolTip() == "DDIM's eta"
    spin.setValue(0.25)  # an edit in the widget lands in the graph
    assert window.model.node(node).params["eta"] == 0.25


def test_a_new_field_goes_to_comfyui_and_comes_back(tmp_path: Path, eta_registry: NodeRegistry) -> None:
    wf = _txt2img(eta_registry)
    wf.nodes["sampler"].params["eta"] = 0.4
    prompt = export_api(wf, eta_registry)
    (ksampler,) = [n for n in prompt.values() if n["class_type"] == "KSampler"]
    assert ksampler["inputs"]["eta"] == 0.4

    path = tmp_path / "exported.api.json"
    path.write_text(json.dumps(prompt))
    nodes = import_comfy(path, eta_registry).workflow["nodes"]
    (sampler,) = [n for n in nodes.values() if n["type"] == "Sampler"]
    assert sampler["params"]["eta"] == 0.4


def test_a_new_field_reaches_the_settings_the_node_builds() -> None:
    # SamplerSettings already has `eta`: a Sampler field of that name is passed on, no list to edit.
    node = SamplerWithEta(denoiser=None, positive=None, eta=0.7, steps=9)
    settings = settings_from(SamplerSettings, node)
    assert (settings.eta, settings.steps, settings.cfg) == (0.7, 9, 4.0)


def test_sampler_defaults_agree_with_sampler_settings() -> None:
    """Where Sampler and SamplerSettings share a name, they share the default (a script using SamplerSettings()
    gets the picture an untouched Sampler node gives)."""
    defaults = {f.name: f.default for f in dataclasses.fields(SamplerSettings)}
    shared = {p.name: p.default for p in Sampler.spec.params if p.name in defaults}
    assert set(shared) == {
        "scheduler",
        "sigma_schedule",
        "steps",
        "cfg",
        "seed",
        "denoise",
        "cache",
        "cache_threshold",
        "cfg_rule",
        "cfg_norm",
    }
    assert shared == {name: defaults[name] for name in shared}


def test_sampler_advanced_is_the_sampler_fields_plus_its_own() -> None:
    sampler, advanced = Sampler.spec, SamplerAdvanced.spec
    # Declared once: the same facts, except what the advanced sampler overrides.
    assert advanced.param("steps") == sampler.param("steps")
    assert advanced.param("sigma_schedule") == sampler.param("sigma_schedule")
    assert (sampler.param("cfg").default, advanced.param("cfg").default) == (4.0, 8.0)
    assert dataclasses.replace(advanced.param("cfg"), default=4.0) == sampler.param("cfg")
    assert advanced.param("seed").comfy == "noise_seed" and sampler.param("seed").comfy == "seed"
    assert advanced.input("latent").optional is False and sampler.input("latent").optional is True
    assert {p.name for p in advanced.params} - {p.name for p in sampler.params} == {
        "add_noise",
        "start_step",
        "end_step",
        "leftover_noise",
    }


def test_cli_and_sweep_parse_with_the_same_kind() -> None:
    steps = Param("steps", "int", default=1)
    assert (steps.parse("30"), steps.parse(2.0), steps.parse("3.5")) == (
        30,
        2,
        "3.5",
    )  # "3.5" is refused later
    flag = Param("on", kinds.BOOL)
    assert (flag.parse("yes"), flag.parse("off"), flag.parse("maybe")) == (True, False, "maybe")
    clip = Param("clip_skip", kinds.CHOICE, default=-1, choices=(-1, -2))
    assert (clip.parse("-2"), clip.parse(-1)) == (-2, -1)
    words = Param("mode", kinds.CHOICE, default="1", choices=("1", "2"))
    assert words.parse("2") == "2"  # a choice as typed wins over its JSON reading


def test_the_old_nodespec_form_still_declares_a_node_type() -> None:
    spec = NodeSpec(
        type="Old",
        title="Old",
        category="test",
        run=lambda ctx, n: {"n": n},
        params=[Param("n", "int", default=3, min=0)],
        outputs=[Output("n", INT)],
    )
    param_n = spec.param("n")
    assert param_n.kind is kinds.INT and param_n.kind == "int"  # a kind still equals its name
    assert param_n.check(-1) == "-1 is below the minimum 0"
    with pytest.raises(ValueError, match="unknown parameter kind 'integer'"):
        Param("n", "integer")


def test_a_field_without_a_declaration_is_refused() -> None:
    with pytest.raises(TypeError, match="field 'count': declare it with param"):

        @node_type("Bad", title="Bad", category="test")
        class Bad:
            count: int = 0
