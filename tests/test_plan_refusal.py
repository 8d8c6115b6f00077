"""`app plan` on a budget no policy fits, as a user runs it: a fresh process, exit 1 naming each policy's
need, and an answer made from headers and configs without importing diffusers (the seconds that import
costs are what made a "no" slow; benchmarks/plan_accuracy.py `--refusal` prints the time).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TXT2IMG = REPO / "resources/workflows/txt2img.json"

_SCRIPT = (
    "import sys\n"
    "from app.main import main\n"
    "code = main(sys.argv[1:])\n"
    "print('imported diffusers:', 'diffusers' in sys.modules)\n"
    "sys.exit(code)\n"
)


@pytest.mark.slow  # a fresh process importing torch (seconds)
def test_app_plan_below_every_need_exits_1_naming_it_without_importing_diffusers(tmp_path: Path) -> None:
    cmd = [sys.executable, "-c", _SCRIPT, "plan", str(TXT2IMG), "--device", "cpu", "--ram-budget", "1MiB"]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    assert "does not fit" in done.stderr and "least budget per policy: none" in done.stderr
    assert "MiB" in done.stderr.split("least budget per policy:")[1]
    assert "Traceback" not in done.stderr
    assert "imported diffusers: False" in done.stdout
    # The text says what its baseline leaves out, since it did not import it.
    assert (
        "without" in done.stdout and "diffusers" in done.stdout.split("process baseline")[1].splitlines()[0]
    )


_MODULES_SCRIPT = (
    "import sys\n"
    "from app.main import main\n"
    "code = main(sys.argv[1:])\n"
    "print('imported:', sorted(m for m in ('diffusers', 'transformers') if m in sys.modules))\n"
    "sys.exit(code)\n"
)


@pytest.mark.slow  # a fresh process per workflow, importing torch (seconds each)
@pytest.mark.parametrize(
    "name",
    [
        "txt2img",
        "img2img",
        "inpaint",
        "hires_fix",
        "controlnet",
        "txt2img_flux",
        "txt2video",
        "img2video",
        "edit_qwenimage",
        "edit_qwenimage21",
        "img2video_minimax",
    ],
)
def test_a_refusal_imports_neither_diffusers_nor_transformers(name: str) -> None:
    # The shipped workflows whose "no" is made from headers and configs alone: no model library, no tokenizer
    # (the text and VAE nodes stop at their model use, before their preprocessing imports them). The
    # picture prompts (Qwen-Image-Edit, Qwen-Image 2.1, MiniMax H3's keyframes) declare their size from the
    # folder's preprocessor_config.json and tokenizer.json, so not even transformers' image processor.
    workflow = REPO / "resources/workflows" / f"{name}.json"
    cmd = [
        sys.executable,
        "-c",
        _MODULES_SCRIPT,
        "plan",
        str(workflow),
        "--device",
        "cpu",
        "--ram-budget",
        "1MiB",
    ]
    if '"demo:' in workflow.read_text(encoding="utf-8"):
        # A demo model is built (with diffusers) the first time it is named; the question is the answer after.
        subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    assert "least budget per policy: none" in done.stderr
    assert "imported: []" in done.stdout


@pytest.mark.slow  # a fresh process importing torch (seconds)
def test_a_first_llm_plan_refuses_from_the_gguf_header_without_transformers(tmp_path: Path) -> None:
    # An empty data dir: the GGUF is not repacked yet, so Load LLM's first repack is the need. It is reserved
    # from the file's header, before the LLM runtime (transformers) is imported and the vocabulary parsed.
    # keep_quantized on: the repack `auto` picks on a CPU whose packed kernels measure faster (as here).
    workflow = REPO / "resources/workflows/llm.json"
    cmd = [sys.executable, "-c", _MODULES_SCRIPT, "plan", str(workflow), "--device", "cpu"]
    cmd += ["--ram-budget", "1MiB", "--set", "llm.keep_quantized=on"]
    env = {**os.environ, "NODELOOM_DATA_DIR": str(tmp_path)}
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 1, done.stderr
    assert "least budget per policy: none" in done.stderr and "Traceback" not in done.stderr
    assert "stopped before repacking SmolLM2" in done.stdout
    assert "imported: []" in done.stdout
    assert not list(tmp_path.rglob("packed.safetensors"))  # the plan repacked nothing
