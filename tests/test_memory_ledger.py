"""The ledger: exact bytes from headers, LRU eviction of unlocked models only, and the budget invariant."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from memory import BudgetExceeded, ComponentSpec, MemoryConfig, MemoryManager, policy_named


class Stack(torch.nn.Module):
    """A head, a ModuleList of blocks and a tail: the shape pipelines declare with `blocks=("layers",)`."""

    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.head = torch.nn.Linear(width, width)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(depth))
        self.norm = torch.nn.LayerNorm(width)
        self.register_buffer("steps", torch.arange(4))  # an integer buffer: counted at its own dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.head(x)
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return self.norm(x)


def save_stack(path: Path, width: int = 64, depth: int = 4, seed: int = 0, dtype=torch.float32) -> Path:
    torch.manual_seed(seed)
    save_file(Stack(width, depth).to(dtype).state_dict(), path)
    return path


def spec_for(path: Path, key: str, width: int = 64, depth: int = 4, blocks=(), dtype=torch.float32):
    def build() -> torch.nn.Module:
        module = Stack(width, depth)
        module.load_state_dict(load_file(path))
        return module

    return ComponentSpec(key, key, "other", build, (path,), dtype, blocks)


def test_weight_bytes_from_headers_equal_tensor_bytes(tmp_path: Path) -> None:
    path = save_stack(tmp_path / "s.safetensors", dtype=torch.float16)
    tensors = load_file(path)
    with MemoryManager(MemoryConfig(device="cpu", data_dir=tmp_path)) as mm:
        as_stored = mm.register(spec_for(path, "a", dtype=torch.float16))
        upcast = mm.register(spec_for(path, "b", dtype=torch.float32))
        assert as_stored.location == "disk" and as_stored.module is None  # nothing loaded to know it
        assert as_stored.weight_bytes == sum(t.numel() * t.element_size() for t in tensors.values())
        # Accounted at the run dtype: floats double, the int64 buffer stays as it is.
        floats = sum(t.numel() for t in tensors.values() if t.is_floating_point())
        assert upcast.weight_bytes == floats * 4 + tensors["steps"].numel() * 8
        with mm.use(upcast) as module:
            assert all(p.dtype == torch.float32 for p in module.parameters())
            assert upcast.device_bytes == upcast.weight_bytes
        assert mm.register(spec_for(path, "a")) is as_stored


def test_weight_bytes_of_one_component_in_a_single_file(tmp_path: Path) -> None:
    torch.manual_seed(0)
    unet, clip = torch.nn.Linear(32, 32), torch.nn.Linear(16, 8)
    tensors = {f"model.diffusion_model.{k}": v for k, v in unet.state_dict().items()}
    tensors |= {f"cond_stage_model.{k}": v for k, v in clip.state_dict().items()}
    save_file(tensors, tmp_path / "checkpoint.safetensors")
    spec = ComponentSpec(
        "ckpt#unet", "unet", "denoiser", lambda: unet, (tmp_path / "checkpoint.safetensors",),
        prefixes=("model.diffusion_model.",),
    )  # fmt: skip
    with MemoryManager(MemoryConfig(device="cpu", data_dir=tmp_path)) as mm:
        assert mm.register(spec).weight_bytes == (32 * 32 + 32) * 4


def three(tmp_path: Path, budget_models: float, policy: str = "auto", blocks=()):
    paths = [save_stack(tmp_path / f"{k}.safetensors", seed=i) for i, k in enumerate("abc")]
    probe = MemoryManager(MemoryConfig(device="cpu", data_dir=tmp_path))
    size = probe.register(spec_for(paths[0], "probe")).weight_bytes
    probe.close()
    mm = MemoryManager(
        MemoryConfig(
            device="cpu", policy=policy, ram_budget=str(int(budget_models * size)), data_dir=tmp_path
        )
    )
    return mm, [mm.register(spec_for(p, k, blocks=blocks)) for p, k in zip(paths, "abc", strict=True)]


def test_eviction_is_least_recently_used_first(tmp_path: Path) -> None:
    mm, (a, b, c) = three(tmp_path, 2.5)
    with mm:
        for h in (a, b, a):
            with mm.use(h):
                pass
        with mm.use(c):
            pass
        assert (a.location, b.location, c.location) == ("device", "disk", "device")
        unloads = [e.component for e in mm.telemetry.events() if type(e).__name__ == "UnloadEvent"]
        assert unloads == ["b"]


def test_locked_models_are_never_evicted(tmp_path: Path) -> None:
    mm, (a, b, c) = three(tmp_path, 2.5)
    with mm:
        with mm.use(a):
            with mm.use(b):
                pass
            with mm.use(c):  # a is older but locked: b goes
                assert a.location == "device" and b.location == "disk"
            with mm.use(b):  # needs room again: c is the only unlocked one
                assert c.location == "disk"
                with pytest.raises(BudgetExceeded) as err:
                    with mm.use(c):
                        pass
        assert "c" in str(err.value) and "budget" in str(err.value)


def test_partial_eviction_keeps_the_rest_and_the_output(tmp_path: Path) -> None:
    mm, (a, b, _) = three(tmp_path, 1.7, blocks=("layers",))
    x = torch.randn(3, 64)
    with mm:
        with mm.use(a) as module:
            want = module(x)
        with mm.use(b):
            assert a.location == "partial"  # gave up blocks, not everything
            assert 0 < a.device_bytes < a.weight_bytes
        with mm.use(a) as module:
            assert torch.equal(module(x), want)


def test_policy_none_refuses_instead_of_evicting(tmp_path: Path) -> None:
    mm, (a, b, _) = three(tmp_path, 1.5, policy="none")
    with mm:
        with mm.use(a):
            pass
        with pytest.raises(BudgetExceeded) as err:
            with mm.use(b):
                pass
        assert err.value.needs > err.value.has
        assert a.location == "device" and b.module is None  # b was never read from disk


def test_ledger_never_exceeds_budget_over_random_use(tmp_path: Path) -> None:
    rng = random.Random(1234)
    mm, handles = three(tmp_path, 2.2, blocks=("layers",))
    size = handles[0].weight_bytes
    checks = 0

    def check() -> None:
        nonlocal checks
        checks += 1
        assert mm.ledger.device_used() <= mm.budget, mm.ledger_text()

    def run(depth: int) -> None:
        h = rng.choice(handles)
        working = rng.choice([0, size // 10, size // 3])
        try:
            with mm.use(h, working_bytes=working) as module:
                check()
                module(torch.randn(2, 64))
                check()
                if depth < 2 and rng.random() < 0.4:
                    run(depth + 1)
        except BudgetExceeded:
            check()
        if rng.random() < 0.2:
            try:
                mm.reserve_working(rng.randrange(size), "scratch")
                check()
            except BudgetExceeded:
                pass
            mm.release_working("scratch")
        if rng.random() < 0.1:
            mm.policy = policy_named(rng.choice(["auto", "sequential", "stream"]))
        check()

    with mm:
        for _ in range(120):
            run(0)
    assert checks > 200
