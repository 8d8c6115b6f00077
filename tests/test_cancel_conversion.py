"""Ctrl+C during a first GGUF conversion (a long call with no steps) stops it at once, leaving no cache."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from gguf import GGMLQuantizationType

import pipelines.llm.gguf_cache as gguf_cache
from app.main import main
from pipelines.llm.gguf_cache import gguf_cache_dir, gguf_cache_root
from tests.llm_fixtures import tiny_llama, write_tiny_gguf

REPO = Path(__file__).resolve().parent.parent


def test_ctrl_c_cancels_a_gguf_conversion_at_once(tmp_path, monkeypatch) -> None:
    model = tmp_path / "tiny.gguf"
    write_tiny_gguf(tiny_llama(), model, GGMLQuantizationType.F32)
    started = threading.Event()
    steps: list[int] = []
    real_convert = gguf_cache.convert_gguf

    def slow_convert(path, dest, on_plan=None, on_progress=None):  # noqa: ANN001, ANN202
        dest.mkdir(parents=True)
        (dest / "partial.bin").write_bytes(b"x")
        started.set()
        for i in range(2000):  # 20 s unless interrupted; nothing in here checks the cancel token
            steps.append(i)
            time.sleep(0.01)
        return real_convert(path, dest, on_plan, on_progress)

    monkeypatch.setattr(gguf_cache, "convert_gguf", slow_convert)

    def press_ctrl_c() -> None:
        started.wait(60)
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGINT)

    presser = threading.Thread(target=press_ctrl_c)
    presser.start()
    code = main(
        [
            "--run",
            str(REPO / "resources/workflows/llm.json"),
            "--set",
            f"llm.path={model}",
            "--set",
            "llm.keep_quantized=off",  # the float32 conversion (auto repacks for the int4/int8 kernels on a CPU)
            "--out",
            str(tmp_path / "out"),
            "--quiet",
        ]
    )
    presser.join()
    assert code == 130
    assert started.is_set() and len(steps) < 2000  # stopped by the first Ctrl+C, not run to the end
    assert not gguf_cache_dir(model).exists()
    assert not [p for p in gguf_cache_root().iterdir() if p.name.startswith(".")]  # temp folder removed
