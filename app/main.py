"""`app` / `nodeloom`: the one entry point for the GUI, headless runs and small utilities.

Lives here: argument parsing and dispatch (`main`). Imports `app.cli`, `nodes`, `pipelines`; the GUI
(`app.gui`, Qt) is imported only when a window is asked for, so headless runs never load Qt.

    app                              open the editor
    app WORKFLOW.json                open the editor on a workflow (or a PNG with one embedded)
    app --run WORKFLOW.json [...]    run it without a window
    app models make-demo             build the tiny demo models offline
    app models list                  the models library: name, kind, family, format, size
    app nodes                        list the node types (including installed node packs)
    app import FILE [-o OUT.json]    a ComfyUI workflow (API/UI JSON or PNG) -> a Nodeloom workflow
    app check FILE                   validate without running (exit 0, or 2 with the problems)
    app plan WORKFLOW [--json ...]   will it fit? the memory plan of a run, no weights loaded (app/plan_command)
    app serve [--host H --port P]    a ComfyUI-compatible HTTP + websocket server (app/server)
    app export-comfy WF OUT.json     a workflow of mapped nodes -> ComfyUI API format
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

# Idle OpenMP workers sleep instead of spinning: on a small machine spinning threads starve the GUI,
# the telemetry sampler and other processes (measured here: a 20-step sample went from 12.7 s to
# 0.66 s on a loaded 2-core box). Must be set before torch loads; a user's own setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# Never reach for a model hub: every model is a local file, a built-in or a demo built offline.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Nodeloom shows its own progress; the libraries' bars and advice would interleave with it.
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")

from app.exit_codes import EXIT_INVALID  # noqa: E402  (after the environment above)
from app.memory_args import add_memory_arguments  # noqa: E402
from app.models_dir_arg import add_models_dir_argument  # noqa: E402
from nodes.registry import default_registry  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="app",
        description="Nodeloom: node graphs for diffusion and LLM pipelines that fit the device you have.",
    )
    p.add_argument("workflow", nargs="?", type=Path, help="workflow to open in the editor")
    p.add_argument("--run", type=Path, metavar="WORKFLOW", help="run a workflow without a window")
    p.add_argument("--out", default="outputs", help="output folder (default ./outputs)")
    p.add_argument(
        "--set", action="append", metavar="NODE.PARAM=VALUE", help="override a parameter; repeatable"
    )
    add_memory_arguments(p)
    p.add_argument(
        "--repeat", type=int, default=1, help="run N times in one process (later runs use the cache)"
    )
    p.add_argument("--report", type=Path, help="write a JSON report of the run(s) here")
    p.add_argument(
        "--threads",
        type=int,
        help="CPU threads for torch (default: torch's choice); 1 is often fastest on a busy small machine",
    )
    p.add_argument("--quiet", action="store_true", help="print only errors")
    add_models_dir_argument(p)
    p.add_argument(
        "--allow-pickle",
        action="store_true",
        help="allow pickle checkpoints: any model file that is not safetensors or GGUF by content, whatever "
        "its name (.ckpt/.pt/.bin...); they can run code, so only for files you trust",
    )
    # Sweeps and clusters (app/batch).
    p.add_argument(
        "--sweep",
        action="append",
        metavar="NODE.PARAM=SPEC",
        help="run once per value: a list 1,2,3, a range 1..16 or 0.5..1.5:0.25, or @file.txt; repeatable (grid)",
    )
    p.add_argument("--zip", action="store_true", help="pair the --sweep values in order instead of a grid")
    p.add_argument(
        "--cluster",
        metavar="ray|ray://HOST:PORT|auto",
        help="run the jobs on Ray: a local instance (one worker per GPU) or an existing cluster",
    )
    p.add_argument("--workers", type=int, help="Ray workers on a machine without GPUs (default 2)")
    return p


def _models_command(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="app models")
    sub = p.add_subparsers(dest="action", required=True)
    sub.add_parser("make-demo", help="build the tiny random demo models into the user data dir (offline)")
    library_actions = {
        "list": "the models library: name, kind, family, format, size [--models-dir DIR]",
        "roots": "the model folders searched, in order",
        "add-root": "save a model folder in the settings (DIR)",
        "remove-root": "forget a saved model folder (DIR)",
    }
    for action, text in library_actions.items():
        sub.add_parser(action, help=text, add_help=False)
    if argv[:1] and argv[0] in library_actions:
        from app.comfy_commands import models_library_command

        try:
            return models_library_command(argv[0], argv[1:])
        except SystemExit as exc:  # argparse: 2 on bad arguments, 0 on --help
            return int(exc.code or 0)
    args = p.parse_args(argv)
    if args.action == "make-demo":
        from pipelines.diffusion.demo_models import make_all_demo_models

        for name, path in make_all_demo_models().items():
            print(f"{name:<14} {path}")
    return 0


def _nodes_command(argv: list[str]) -> int:
    registry = default_registry()
    for category, specs in registry.categories().items():
        print(category)
        for spec in specs:
            print(f"  {spec.type:<22} {spec.description or spec.title}")
    for name, reason in registry.load_errors:
        print(f"node pack {name!r} failed to load: {reason}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from pipelines.diffusion.lazy_models import install as lazy_diffusers_models

    lazy_diffusers_models()  # diffusers' model files one by one, not every model of a package (start-up)
    if argv[:1] == ["models"]:
        return _models_command(argv[1:])
    if argv[:1] == ["nodes"]:
        return _nodes_command(argv[1:])
    if argv[:1] == ["plan"]:
        from app.plan_command import plan_command

        return plan_command(argv[1:], default_registry())
    if argv[:1] == ["serve"]:
        from app.server.serve import serve_command

        return serve_command(argv[1:], default_registry)
    if argv[:1] and argv[0] in ("import", "check", "export-comfy"):
        # Imported here, not at the top: the editor's start-up does not need the ComfyUI converter.
        from app.comfy_check import check_command
        from app.comfy_commands import export_command, import_command

        comfy_commands = {"import": import_command, "check": check_command, "export-comfy": export_command}
        try:
            return comfy_commands[argv[0]](argv[1:], default_registry())
        except SystemExit as exc:  # argparse: 2 on bad arguments, 0 on --help
            return int(exc.code or 0)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on bad arguments, 0 on --help
        return int(exc.code or 0)
    if args.threads is not None:
        if args.threads < 1:
            print("error: --threads must be at least 1", file=sys.stderr)
            return EXIT_INVALID
        import torch

        torch.set_num_threads(args.threads)
    registry = default_registry()
    if args.run is not None:
        if args.repeat < 1:
            print("error: --repeat must be at least 1", file=sys.stderr)
            return EXIT_INVALID
        if args.sweep or args.cluster or args.zip:
            from app.batch.cli import run_sweep

            return run_sweep(args, registry)
        from app.cli import run_headless

        return run_headless(args, registry)
    if (
        sys.platform.startswith("linux")
        and not os.environ.get("QT_QPA_PLATFORM")
        and not os.environ.get("DISPLAY")
        and not os.environ.get("WAYLAND_DISPLAY")
    ):
        # Qt would abort the process with a plugin message; say what to do instead.
        print(
            "no display found: run the editor under `xvfb-run app ...`, or run the workflow headless with "
            "`app --run WORKFLOW.json`",
            file=sys.stderr,
        )
        return EXIT_INVALID
    try:
        from app.gui import launch
    except ImportError as exc:
        print(f"the desktop GUI is not available ({exc}); use --run for headless runs", file=sys.stderr)
        return EXIT_INVALID
    return launch(args.workflow, registry, args.models_dir)


if __name__ == "__main__":
    sys.exit(main())
