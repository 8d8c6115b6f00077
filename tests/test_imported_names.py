"""Model and picture names from an imported ComfyUI file stay inside the models folders.

A name in a ComfyUI workflow (API or UI JSON, or a PNG's chunks) is someone else's choice: `app check` (exit 2)
and `--run` refuse absolute paths, `..` and links out of every root, naming node and field, before any file
is opened. The same path typed by the user into their own Nodeloom workflow is taken as it is.
`builtin:` names never leave the built-in folder, whoever wrote them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image, PngImagePlugin

from app.main import main
from nodes.model_names import confined_fields
from nodes.workflow import workflow_from_dict
from pipelines.models_library import ModelsLibrary, NameEscapeError
from pipelines.paths import resolve_imported_model, resolve_model_path

DATA = Path(__file__).resolve().parent / "data" / "comfy"
SAFETENSORS = b"not read: these tests stop before any model file is opened"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A ComfyUI install: models/checkpoints/ok.safetensors, input/pic.png, and a file outside it."""
    install = tmp_path / "ComfyUI"
    (install / "models" / "checkpoints").mkdir(parents=True)
    (install / "models" / "checkpoints" / "ok.safetensors").write_bytes(SAFETENSORS)
    (install / "input").mkdir()
    Image.new("RGB", (8, 8), (10, 200, 30)).save(install / "input" / "pic.png")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "secret.safetensors").write_bytes(SAFETENSORS)
    Image.new("RGB", (8, 8), (200, 10, 30)).save(outside / "private.png")
    return install


def _api(ckpt_name: str) -> dict:
    prompt = json.loads((DATA / "sd15_default.api.json").read_text())
    prompt["4"]["inputs"]["ckpt_name"] = ckpt_name
    return prompt


def _ui(ckpt_name: str) -> dict:
    workflow = json.loads((DATA / "real" / "sd15_default.json").read_text())
    (loader,) = [n for n in workflow["nodes"] if n["type"] == "CheckpointLoaderSimple"]
    loader["widgets_values"] = [ckpt_name]
    return workflow


def _write(tmp_path: Path, form: str, ckpt_name: str) -> Path:
    if form == "png":  # the chunks ComfyUI's SaveImage writes
        path, info = tmp_path / "comfy.png", PngImagePlugin.PngInfo()
        info.add_text("prompt", json.dumps(_api(ckpt_name)))
        Image.new("RGB", (8, 8)).save(path, pnginfo=info)
        return path
    path = tmp_path / f"comfy_{form}.json"
    path.write_text(json.dumps(_api(ckpt_name) if form == "api" else _ui(ckpt_name)))
    return path


def _escapes(root: Path) -> dict[str, str]:
    link = root / "models" / "checkpoints" / "link.safetensors"
    link.symlink_to(root.parent / "elsewhere" / "secret.safetensors")
    return {
        "dotdot": ("../../../../../../../../etc/passwd", "climbs out of the models folders with '..'"),
        "absolute": (str(root.parent / "elsewhere" / "secret.safetensors"), "is an absolute path"),
        "symlink": ("link.safetensors", "is a link to"),
        "builtin": ("builtin:../../../etc/passwd", "climbs out of"),
    }


@pytest.mark.parametrize("form", ["api", "ui", "png"])
@pytest.mark.parametrize("case", ["dotdot", "absolute", "symlink", "builtin"])
def test_an_imported_name_that_leaves_the_models_folders_is_refused(
    root: Path, tmp_path: Path, capsys, form: str, case: str
) -> None:
    name, reason = _escapes(root)[case]
    source = _write(tmp_path, form, name)
    assert main(["check", str(source), "--models-dir", str(root)]) == 2
    err = capsys.readouterr().err
    assert "node 'load_checkpoint', field 'path':" in err and reason in err, err
    out = tmp_path / "out"
    assert main(["--run", str(source), "--models-dir", str(root), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "node 'load_checkpoint', field 'path':" in err and reason in err, err
    assert not out.exists()


def test_a_name_inside_a_root_passes_and_resolves_there(root: Path, tmp_path: Path, capsys) -> None:
    assert main(["check", str(_write(tmp_path, "api", "ok.safetensors")), "--models-dir", str(root)]) == 0
    library = ModelsLibrary([root])
    found = resolve_imported_model("ok.safetensors", library, ("checkpoints",))
    assert found == root / "models" / "checkpoints" / "ok.safetensors"
    # A root that is itself a link (models on another disk) is fine: what counts is where the root leads.
    linked = tmp_path / "linked-root"
    linked.symlink_to(root / "models")
    assert resolve_imported_model("ok.safetensors", ModelsLibrary([linked]), ("checkpoints",)).is_file()


def test_without_a_models_folder_check_refuses_what_the_name_says_and_run_refuses_any_name(
    root: Path, tmp_path: Path, capsys
) -> None:
    escape = _write(tmp_path, "api", "/etc/passwd")
    assert main(["check", str(escape)]) == 2
    assert (
        "node 'load_checkpoint', field 'path': '/etc/passwd' is an absolute path" in capsys.readouterr().err
    )
    plain = _write(tmp_path, "ui", "ok.safetensors")
    assert main(["check", str(plain)]) == 0  # nothing to look in: the note says names were not checked
    assert "model names not checked" in capsys.readouterr().err
    # A run has to open the file, and a name from the ComfyUI file means a file in a models folder.
    assert main(["--run", str(plain), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert "node 'load_checkpoint', field 'path': model 'ok.safetensors' not found" in capsys.readouterr().err


def test_the_users_own_workflow_may_name_any_path(root: Path, tmp_path: Path, capsys) -> None:
    """Imported, then the path set by the user (as the editor or --set would): taken as it is."""
    mine = tmp_path / "mine.json"
    assert main(["import", str(_write(tmp_path, "api", "ok.safetensors")), "-o", str(mine)]) == 0
    data = json.loads(mine.read_text())
    elsewhere = root.parent / "elsewhere" / "secret.safetensors"
    data["nodes"]["load_checkpoint"]["params"]["path"] = str(elsewhere)
    mine.write_text(json.dumps(data))
    assert main(["check", str(mine), "--models-dir", str(root)]) == 0
    wf = workflow_from_dict(data, _registry())
    assert ("load_checkpoint", "path") not in confined_fields(wf)
    # Still recorded, and still confined while unchanged: the imported workflow saved as it came.
    data["nodes"]["load_checkpoint"]["params"]["path"] = "../elsewhere/secret.safetensors"
    data["meta"]["comfyui"]["names"]["load_checkpoint"]["path"] = "../elsewhere/secret.safetensors"
    mine.write_text(json.dumps(data))
    assert main(["check", str(mine), "--models-dir", str(root)]) == 2
    assert "climbs out" in capsys.readouterr().err


def test_builtin_names_never_leave_the_builtin_folder_even_in_the_users_workflow(
    tmp_path: Path, capsys
) -> None:
    with pytest.raises(NameEscapeError, match="climbs out"):
        resolve_model_path("builtin:../models/shapes-sd")
    with pytest.raises(NameEscapeError, match="absolute"):
        resolve_model_path("builtin:/etc/passwd")
    with pytest.raises(NameEscapeError, match="climbs out"):
        resolve_model_path("demo:../../x")
    wf = json.loads((Path(__file__).resolve().parent.parent / "resources/workflows/txt2img.json").read_text())
    (loader,) = [n for n in wf["nodes"].values() if n["type"] == "LoadDiffusionModel"]
    loader["params"]["path"] = "builtin:../../pipelines"
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(wf))
    assert main(["--run", str(path), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert "'builtin:../../pipelines' climbs out of" in capsys.readouterr().err


def _image_api(image: str) -> dict:
    return {
        "1": {"class_type": "LoadImage", "inputs": {"image": image}},
        "2": {"class_type": "SaveImage", "inputs": {"images": ["1", 0], "filename_prefix": "copy"}},
    }


@pytest.mark.parametrize(
    "image, reason",
    [
        ("ABSOLUTE", "is an absolute path"),
        ("../elsewhere/private.png", "climbs out of"),
        ("link.png", "is a link to"),
        ("builtin:../../../etc/hosts", "climbs out of"),
    ],
)
def test_an_imported_loadimage_stays_in_the_input_folder(
    root: Path, tmp_path: Path, capsys, image: str, reason: str
) -> None:
    private = root.parent / "elsewhere" / "private.png"
    (root / "input" / "link.png").symlink_to(private)
    source = tmp_path / "images.json"
    source.write_text(json.dumps(_image_api(str(private) if image == "ABSOLUTE" else image)))
    out = tmp_path / "out"
    assert main(["--run", str(source), "--models-dir", str(root), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "node 'load_image', field 'path':" in err and reason in err, err
    assert not out.exists()  # nothing copied into the outputs


def test_an_imported_loadimage_reads_comfyuis_input_folder(root: Path, tmp_path: Path) -> None:
    source = tmp_path / "images.json"
    source.write_text(json.dumps(_image_api("pic.png")))
    out = tmp_path / "out"
    assert main(["--run", str(source), "--models-dir", str(root), "--out", str(out), "--quiet"]) == 0
    (copy,) = out.glob("copy*.png")
    with Image.open(copy) as saved, Image.open(root / "input" / "pic.png") as original:
        assert saved.convert("RGB").tobytes() == original.convert("RGB").tobytes()


def _registry():
    from nodes.registry import default_registry

    return default_registry()


def test_a_path_set_with_set_replaces_the_imported_name(root: Path, tmp_path: Path, capsys) -> None:
    """`--set` is the user's choice: it replaces an imported name (even one that would be refused) before
    names are checked, and then it may be any path."""
    source = _write(tmp_path, "api", "/etc/passwd")
    elsewhere = root.parent / "elsewhere" / "missing.safetensors"
    run = ["--run", str(source), "--models-dir", str(root), "--out", str(tmp_path / "o"), "--quiet"]
    assert main([*run, "--set", f"load_checkpoint.path={elsewhere}"]) == 2
    err = capsys.readouterr().err
    # Refused only because the user's file does not exist, said as for any path the user typed.
    assert (
        f"node 'load_checkpoint', field 'path': file does not exist: {elsewhere}" in err
        and "/etc/passwd" not in err
    )


def test_a_sweep_of_an_imported_workflow_keeps_its_names_inside_too(
    root: Path, tmp_path: Path, capsys
) -> None:
    imported = tmp_path / "imported.json"
    source = _write(tmp_path, "api", str(root.parent / "elsewhere" / "secret.safetensors"))
    assert main(["import", str(source), "-o", str(imported)]) == 0
    out = tmp_path / "out"
    sweep = ["--sweep", "ksampler.seed=1..2", "--models-dir", str(root), "--out", str(out), "--quiet"]
    assert main(["--run", str(imported), *sweep]) == 2
    assert (
        "node 'load_checkpoint', field 'path':" in (err := capsys.readouterr().err)
        and "is an absolute path" in err
    )
    assert not out.exists()


def test_check_without_a_models_folder_refuses_an_absolute_picture(
    root: Path, tmp_path: Path, capsys
) -> None:
    source = tmp_path / "images.json"
    source.write_text(json.dumps(_image_api(str(root.parent / "elsewhere" / "private.png"))))
    assert main(["check", str(source)]) == 2
    err = capsys.readouterr().err
    assert (
        "node 'load_image', field 'path':" in err and "must name a file inside ComfyUI's input folder" in err
    )


def test_a_name_inside_an_imported_subgraph_stays_confined_when_a_run_expands_it(
    root: Path, tmp_path: Path
) -> None:
    """The editor keeps a ComfyUI subgraph as a subgraph; its inner loader's name is still the import's, so the
    run (which expands it, inner ids becoming `instance/inner`) must refuse a path out of the models folders."""
    from app.importing import import_file
    from nodes.model_names import resolve_model_names
    from nodes.registry import default_registry
    from nodes.subgraph import expand_subgraphs

    workflow = json.loads((DATA / "real" / "flux_dev_checkpoint_example.json").read_text())
    secret = str(tmp_path / "elsewhere" / "secret.safetensors")
    for sg in workflow["definitions"]["subgraphs"]:
        for node in sg["nodes"]:
            if node["type"] == "UNETLoader":
                node["widgets_values"][0] = secret
    path = tmp_path / "flux_subgraph.json"
    path.write_text(json.dumps(workflow))
    folded = import_file(path, default_registry(entry_point_packs=False))
    assert folded.subgraphs, "the import should keep the subgraph"
    run = expand_subgraphs(folded)
    [loader] = [nid for nid, n in run.nodes.items() if n.params.get("path") == secret]
    assert "/" in loader  # an expanded inner id
    assert any(nid == loader for nid, _ in confined_fields(run))
    problems = resolve_model_names(run, ModelsLibrary([root / "models"]))
    assert any(p.node == loader and p.field == "path" and "models folders" in p.reason for p in problems), (
        problems
    )
