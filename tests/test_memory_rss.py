"""Peak host RSS of a three-component pipeline (~300 MB each), one process per policy.

What a user of a small machine checks: running one component at a time (`sequential`) must need far less
RAM than keeping all three (`none`), and streaming blocks (`stream`) less again.
"""

from __future__ import annotations

import json
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
    folder = tmp_path_factory.mktemp("rss")
    g = torch.Generator().manual_seed(0)
    for i in range(3):
        layers = {f"layers.{j}.weight": torch.randn(WIDTH, WIDTH, generator=g) * 0.02 for j in range(DEPTH)}
        save_file(layers, folder / f"c{i}.safetensors")
    return folder


def peak_above_base(folder: Path, policy: str, budget: str = "") -> int:
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(folder), policy, budget],
        capture_output=True,
        text=True,
        cwd=root,
        env={"PYTHONPATH": str(root), "OMP_NUM_THREADS": "1", "NODELOOM_DATA_DIR": str(folder)},
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout.strip().splitlines()[-1])
    return data["peak"] - data["base"]


@pytest.mark.slow
def test_sequential_and_stream_lower_peak_rss(components: Path) -> None:
    component = WIDTH * WIDTH * 4 * DEPTH
    none = peak_above_base(components, "none")
    sequential = peak_above_base(components, "sequential")
    stream = peak_above_base(components, "stream", budget=str(component // 3))
    # none holds all three; sequential one at a time; stream a third of one plus a block.
    assert none > 2.5 * component
    assert sequential < 1.4 * component
    assert stream < 0.6 * component
