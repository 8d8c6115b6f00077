"""Peak host RSS of a three-component pipeline (~300 MB each), one process per policy.

What a user of a small machine checks: running one component at a time (`sequential`) must need far less
RAM than keeping all three (`none`), and streaming blocks (`stream`) less again.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

WIDTH, DEPTH = 2048, 18  # 18 x 2048 x 2048 x 4 bytes = 302 MB per component

CHILD = r"""
import json, sys
from pathlib import Path
import torch
from safetensors.torch import load_file
from memory import ComponentSpec, MemoryConfig, MemoryManager
from memory.devices import peak_rss, read_host

torch.set_num_threads(1)
folder, policy, budget = Path(sys.argv[1]), sys.argv[2], sys.argv[3]

class Stack(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(DEPTH))
    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x

def builder(path):
    def build():
        with torch.device("meta"):
            m = Stack()
        m.load_state_dict(load_file(path), assign=True)  # memory-mapped, as from_pretrained does
        return m
    return build

base = read_host().rss
with MemoryManager(MemoryConfig(device="cpu", policy=policy, ram_budget=budget or None, data_dir=folder)) as mm:
    handles = [mm.register(ComponentSpec(f"c{i}", f"c{i}", "other", builder(p), (p,), blocks=("layers",)))
               for i, p in enumerate(sorted(folder.glob("*.safetensors")))]
    x = torch.randn(4, WIDTH)
    with torch.no_grad():
        for h in handles:
            with mm.use(h) as module:
                x = module(x)
print(json.dumps({"base": base, "peak": peak_rss()}))
""".replace("WIDTH", str(WIDTH)).replace("DEPTH", str(DEPTH))


@pytest.fixture(scope="module")
def components(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three component files. One set of random weights copied twice: what is measured is the pages each
    file's weights take once loaded, not their values (and drawing and writing 906 MB took ~3 s)."""
    folder = tmp_path_factory.mktemp("rss")
    g = torch.Generator().manual_seed(0)
    layers = {f"layers.{j}.weight": torch.randn(WIDTH, WIDTH, generator=g) * 0.02 for j in range(DEPTH)}
    save_file(layers, folder / "c0.safetensors")
    for i in (1, 2):  # separate files, so separate pages: nothing is shared between the components
        shutil.copyfile(folder / "c0.safetensors", folder / f"c{i}.safetensors")
    return folder


def peaks_above_base(folder: Path, runs: dict[str, tuple[str, str]]) -> dict[str, int]:
    """Peak RSS above the imports' of one child process per run (name -> policy, budget). The children run
    side by side: each reads its own peak (VmHWM), which another process's memory does not change."""
    root = Path(__file__).resolve().parents[1]
    env = {"PYTHONPATH": str(root), "OMP_NUM_THREADS": "1", "NODELOOM_DATA_DIR": str(folder)}
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-c", CHILD, str(folder), policy, budget],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=root,
            env=env,
        )
        for name, (policy, budget) in runs.items()
    }
    peaks = {}
    try:
        for name, proc in procs.items():
            stdout, stderr = proc.communicate(timeout=300)
            assert proc.returncode == 0, stderr[-3000:]
            data = json.loads(stdout.strip().splitlines()[-1])
            peaks[name] = data["peak"] - data["base"]
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return peaks


@pytest.mark.slow
def test_sequential_and_stream_lower_peak_rss(components: Path) -> None:
    component = WIDTH * WIDTH * 4 * DEPTH
    peaks = peaks_above_base(
        components,
        {"none": ("none", ""), "sequential": ("sequential", ""), "stream": ("stream", str(component // 3))},
    )
    # none holds all three; sequential one at a time; stream a third of one plus a block.
    assert peaks["none"] > 2.5 * component
    assert peaks["sequential"] < 1.4 * component
    assert peaks["stream"] < 0.6 * component
