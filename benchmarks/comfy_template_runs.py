"""Which of ComfyUI's runnable published templates really run here, on tiny files under their own names.

Lives here: `main` (a script), `runnable_templates`, `run_one`. Imports `nodes`, `app.main` (the CLI, run
in-process in a child), `pipelines.diffusion.comfy_layouts.template_fixtures` and `benchmarks.comfy_templates`.

    python benchmarks/comfy_template_runs.py [--only NAME ...] [--timeout 60] [--work DIR]

Takes every open-weight template that imports with no unsupported node and no family Nodeloom cannot run
(the `--families` figure of `comfy_templates.py`), writes the tiny fixture of its family once (cached in
`--work`), links those files under the names the template asks for in a models folder of its own, places a
picture under each Load Image name, imports it with `--models-dir`, makes it tiny (1-2 steps, 32 px, few
frames: the imported graph's own size / steps / frames widgets rewritten) and runs it on the CPU, each
template in its own child process with a timeout. Prints one line per template (usage share, fixture,
result) and the share of usage that ran.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
# Our loader node -> ComfyUI's models sub-folder its file name is found in.
_SUBFOLDER = {
    "LoadDenoiser": "diffusion_models",
    "LoadTextEncoder": "text_encoders",
    "LoadVAE": "vae",
    "LoadDiffusionModel": "checkpoints",
    "LoadLatentUpsampler": "latent_upscale_models",
    "LoadCLIPVision": "clip_vision",
    "LoadLLM": "text_encoders",
    "LoadLoRA": "loras",
    "LoadUpscaleModel": "upscale_models",
    "LoadControlNet": "controlnet",
}
# Frames per fixture family: the shortest video it makes (Wan 4k+1, LTX-2 8k+1, MiniMax H3 17n + 5: 5 frames,
# as ComfyUI's nodes take them).
_FRAMES = {"wan": 5, "ltx2": 9, "minimax": 5}
_FRAME_KEYS = ("length", "frames", "num_frames", "video_frames")


def runnable_templates() -> dict[str, float]:
    """Template name -> share of open-weight usage, for those with no unsupported node and a runnable family."""
    from benchmarks.comfy_templates import open_weight_usage, templates_folder
    from nodes.comfy.sources import ComfyFormatError, import_comfy_data
    from nodes.registry import default_registry

    folder = templates_folder()
    usage = open_weight_usage(folder)
    total = sum(usage.values()) or 1
    registry = default_registry(entry_point_packs=False)
    out: dict[str, float] = {}
    for name, weight in sorted(usage.items(), key=lambda kv: -kv[1]):
        data = json.loads((folder / f"{name}.json").read_text(encoding="utf-8"))
        try:
            result = import_comfy_data(data, registry, name, title=name)
        except ComfyFormatError:
            continue
        if not result.unsupported and not result.families:
            out[name] = weight / total
    return out


def _model_files(workflow: dict[str, Any]) -> list[tuple[str, str]]:
    """(loader type, file name) of each file the imported workflow names."""
    return [  # `path`, and `path_2` of a dual text encoder (FLUX.1's CLIP-L + T5)
        (node["type"], value)
        for node in workflow["nodes"].values()
        if node["type"] in _SUBFOLDER
        for key, value in node.get("params", {}).items()
        if key in ("path", "path_2", "path_3") and isinstance(value, str) and value
    ]


def _fixture_of(workflow: dict[str, Any]) -> str | None:
    """The fixture of the workflow's denoiser; the model-free one when it has none (an upscaler utility)."""
    from pipelines.diffusion.comfy_layouts.template_fixtures import MODEL_FREE, fixture_of_name

    for type_ in ("LoadDenoiser", "LoadDiffusionModel"):
        for loader, name in _model_files(workflow):
            if loader == type_ and (fixture := fixture_of_name(name)) is not None:
                return fixture
    if not any(loader in ("LoadDenoiser", "LoadDiffusionModel") for loader, _ in _model_files(workflow)):
        return MODEL_FREE
    return None


def _cached_fixture(fixture: str, work: Path) -> tuple[Path | None, Path]:
    """The fixture's (demo folder, models folder), written once under `work/fixtures/<id>`."""
    from pipelines.diffusion.comfy_layouts.template_fixtures import MODEL_FREE, write_fixture, write_lora

    done = work / "fixtures" / fixture
    if not (done / "ok").is_file():
        tmp = Path(tempfile.mkdtemp(dir=work, prefix=f"{fixture}-"))
        write_fixture(fixture, tmp)
        done.parent.mkdir(parents=True, exist_ok=True)
        if not done.exists():
            tmp.rename(done)
        (done / "ok").write_text("", encoding="utf-8")
    models = done / "ComfyUI/models"
    if fixture == MODEL_FREE:
        return None, models
    folder = next(p for p in done.iterdir() if p.is_dir() and p.name.startswith("tiny-"))
    lora = models / "loras" / "lora.safetensors"
    if not lora.is_file() and fixture != "sdxl":  # a LoRA for the templates' LoRA loaders (not SDXL's UNet)
        try:
            write_lora(fixture, folder, lora)
        except Exception as exc:  # then its templates report "no fixture file for LoadLoRA"
            print(f"no LoRA fixture for {fixture}: {exc}", file=sys.stderr)
    return folder, models


def _closest(files: list[str], name: str) -> str:
    """The fixture file most like `name`, among the plain ones where there are (the writers also write a
    scaled-fp8 copy, which runs dequantized on every call: slow on the CPU, and not what this measures)."""
    plain = [f for f in files if "fp8_scaled" not in f] or files
    return max(plain, key=lambda f: difflib.SequenceMatcher(None, f.lower(), name.lower()).ratio())


def _link_names(workflow: dict[str, Any], source: Path, models: Path) -> list[str]:
    """Links of the fixture's files under each name the workflow asks for: the fixture's file of that name
    where it has one (in its sub-folder), else the closest-named file of the loader's sub-folder; returns the
    names with no fixture file of their kind."""
    missing = []
    by_name = {p.name: p for p in source.rglob("*.safetensors")}
    # A one-file checkpoint several loaders read (LTX-2's) goes where its checkpoint loader looks: first.
    first = ("LoadDiffusionModel", "LoadDenoiser")
    for loader, name in sorted(_model_files(workflow), key=lambda f: f[0] not in first):
        if any((models / sub / name).exists() for sub in set(_SUBFOLDER.values())):
            continue  # a name several loaders ask for (LTX-2's one-file checkpoint) is linked once
        sub = _SUBFOLDER[loader]
        if name in by_name:
            found = by_name[name]
            target = models / found.relative_to(source)
        else:
            files = (
                sorted(p.name for p in (source / sub).glob("*.safetensors"))
                if (source / sub).is_dir()
                else []
            )
            if not files:
                missing.append(f"{loader} {name!r}")
                continue
            found, target = source / sub / _closest(files, name), models / sub / name
        target.parent.mkdir(parents=True, exist_ok=True)
        os.link(found, target)
    return missing


def _picture(path: Path, size: tuple[int, int] = (64, 48)) -> None:
    import numpy as np
    from PIL import Image

    w, h = size
    ys, xs = np.mgrid[0:h, 0:w]
    rgb = np.stack([xs * 255 // (w - 1), ys * 255 // (h - 1), np.full_like(xs, 96)], -1)
    rgb[h // 4 : h // 2, w // 4 : w // 2] = (240, 240, 40)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(rgb.astype(np.uint8)).save(path)


def _tiny(workflow: dict[str, Any], fixture: str, demo: Path | None, needs_config: bool) -> dict[str, Any]:
    """The imported workflow at tiny settings: its own size / steps / frames widgets rewritten."""
    side = 64 if fixture == "ltx2" else 32  # LTX-2's first stage runs at half size, 32 px at least
    for node in workflow["nodes"].values():
        params = node.get("params", {})
        if node["type"] == "FluxKontextImageScale":  # about a megapixel: a plain small scale instead
            node["type"] = "ImageScale"
            node["params"] = {"width": 48, "height": 32, "method": "lanczos", "crop": "center"}
            continue
        if node["type"] in ("TextEncodeQwenImageEdit", "TextEncodeQwenImageEditPlus"):
            # The encoders' own picture sizes (1024 x 1024 px for the VAE reference, 384 x 384 px for
            # Qwen2.5-VL) are not widgets in ComfyUI's file, so they are set here: at full size the tiny
            # transformer attends over thousands of reference tokens, minutes on the CPU.
            params["vae_pixels"] = 48 * 32
            if node["type"] == "TextEncodeQwenImageEditPlus":  # the first release's node has no VL size
                params["vl_pixels"] = 56 * 56
        for key, value in list(params.items()):
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if key in ("width", "height") and value > side:
                params[key] = side
            elif key == "steps" and value > 2:
                params[key] = 2
            elif key == "megapixels":
                params[key] = 0.01
            elif key == "resolution_steps":  # sides a multiple of 16, as the latents need
                params[key] = 16
            elif key == "vae_pixels":
                params[key] = 48 * 32
            elif key == "vl_pixels":
                params[key] = 56 * 56
            elif key == "batch_size":
                params[key] = 1
            elif key == "max_new_tokens" and value > 16:  # a prompt writer's answer: a few tokens
                params[key] = 16
            elif key in _FRAME_KEYS and (family := fixture.split("_")[0].replace("wan22", "wan")) in _FRAMES:
                params[key] = _FRAMES[family]
        if needs_config and node["type"] in (
            "LoadDenoiser",
            "LoadTextEncoder",
            "LoadVAE",
            "LoadDiffusionModel",
        ):
            params["config_dir"] = str(demo)
    return workflow


def _cli(args: list[str]) -> tuple[int, str]:
    """The CLI run in this process: (exit code, what it wrote to stderr and stdout)."""
    from app.main import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(err):
        try:
            code = main(args)
        except SystemExit as exc:
            code = int(exc.code or 0)
        except Exception as exc:  # a traceback is itself the finding: report its last line
            return 1, f"{type(exc).__name__}: {exc}"
    return code, err.getvalue()


def _first_line(text: str) -> str:
    """The first error line, with the first problem it lists when it ends in a colon, file paths shortened."""
    lines = [line.strip() for line in text.splitlines() if line.strip() and "torchvision" not in line]
    keys = ("error", "failed", "cannot", "traceback")
    at = next((i for i, line in enumerate(lines) if any(k in line.lower() for k in keys)), 0)
    line = (
        " ".join(lines[at : at + 2]) if lines and lines[at].endswith(":") else (lines or ["(no message)"])[at]
    )
    return " ".join(Path(w).name if w.startswith("/") else w for w in line.split(" "))[:300]


def run_one(name: str, work: Path) -> dict[str, Any]:
    """Build, import, check and run one template; {"result": "ran" | "failed" | "no fixture", "detail": ...}."""
    from benchmarks.comfy_templates import templates_folder
    from nodes.comfy.sources import import_comfy_data
    from nodes.registry import default_registry
    from pipelines.diffusion.comfy_layouts.template_fixtures import NEEDS_CONFIG_DIR

    source = templates_folder() / f"{name}.json"
    data = json.loads(source.read_text(encoding="utf-8"))
    plain = import_comfy_data(data, default_registry(entry_point_packs=False), name, title=name).workflow
    fixture = _fixture_of(plain)
    if fixture is None:
        return {"fixture": None, "result": "no fixture", "detail": "no fixture writer for this family"}
    demo, fixture_models = _cached_fixture(fixture, work)
    root = work / "templates" / name
    models = root / "models"
    missing = _link_names(plain, fixture_models, models)
    if missing:
        return {"fixture": fixture, "result": "no fixture", "detail": f"no fixture file for {missing[0]}"}
    for node in plain["nodes"].values():
        if node["type"] == "LoadImage" and isinstance(node.get("params", {}).get("path"), str):
            _picture(root / "input" / node["params"]["path"])
        if node["type"] == "LoadVideo" and isinstance(node.get("params", {}).get("path"), str):
            from pipelines.diffusion.comfy_layouts.template_fixtures import write_tiny_clip

            write_tiny_clip(root / "input" / node["params"]["path"])
    dirs = ["--models-dir", str(models)]
    imported = root / f"{name}.nodeloom.json"
    code, text = _cli(["import", str(source), "-o", str(imported), *dirs])
    if code != 0:
        return {"fixture": fixture, "result": "failed", "detail": f"import: {_first_line(text)}"}
    # `app check` of ComfyUI's file, as a user runs it (the fixtures' tiny shapes need the demo's config for
    # FLUX.1 and SDXL: set on the imported graph below, so those are checked there).
    checked = imported if fixture in NEEDS_CONFIG_DIR else source
    workflow = _tiny(
        json.loads(imported.read_text(encoding="utf-8")), fixture, demo, fixture in NEEDS_CONFIG_DIR
    )
    imported.write_text(json.dumps(workflow), encoding="utf-8")
    code, text = _cli(["check", str(checked), *dirs])
    if code != 0:
        return {"fixture": fixture, "result": "failed", "detail": f"check: {_first_line(text)}"}
    out = root / "out"
    shutil.rmtree(out, ignore_errors=True)  # a earlier run's files are not this run's
    code, text = _cli(["--run", str(imported), "--out", str(out), "--quiet", "--device", "cpu", *dirs])
    if code != 0:
        return {"fixture": fixture, "result": "failed", "detail": f"run: {_first_line(text)}"}
    return {
        "fixture": fixture,
        "result": "ran",
        "detail": f"{sum(1 for p in out.rglob('*') if p.is_file())} files",
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="*", help="these templates only")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per template (its child process)")
    p.add_argument("--work", type=Path, help="a folder for the fixtures (kept: reused by a later run)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="nodeloom-template-runs-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.child:
        print(json.dumps(run_one(args.child, work)))
        return 0
    shares = runnable_templates()
    names = [n for n in shares if not args.only or n in args.only]
    ran = 0.0
    results: dict[str, dict[str, Any]] = {}
    start = time.perf_counter()
    for name in names:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", name, "--work", str(work)]
        t0 = time.perf_counter()
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, cwd=REPO)
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            result = (
                json.loads(lines[-1])
                if lines
                else {
                    "fixture": "?",
                    "result": "failed",
                    "detail": f"crashed: {_first_line(done.stderr[-2000:])}",
                }
            )
        except subprocess.TimeoutExpired:
            result = {"fixture": "?", "result": "failed", "detail": f"timed out after {args.timeout:.0f} s"}
        results[name] = result
        ran += shares[name] if result["result"] == "ran" else 0.0
        print(
            f"{shares[name]:6.2%}  {name}  [{result['fixture']}]  {result['result']}: {result['detail']}"
            f"  ({time.perf_counter() - t0:.0f} s)",
            flush=True,
        )
    considered = sum(shares[n] for n in names)
    print(
        f"\n{len(names)} templates ({considered:.1%} of open-weight usage) in {time.perf_counter() - start:.0f} s"
    )
    print(
        f"ran on tiny fixtures: {sum(r['result'] == 'ran' for r in results.values())} templates, {ran:.1%} of usage"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
