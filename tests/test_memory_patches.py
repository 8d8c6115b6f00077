"""Weight patches in the ledger: what a fused patch keeps (each patched layer's original beside its fused copy)
counts as the model's bytes while it is patched, room for it is made under the policy, and the bytes go
when the patch comes off. On the fly keeps nothing between forwards."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from memory import BudgetExceeded, ComponentSpec, MemoryConfig, MemoryManager
from memory.patches import LayerPatch, fused_bytes, patch_state
from tests.test_memory_ledger import Stack, save_stack, spec_for

WIDTH = 64


def _layers(module: torch.nn.Module, names: tuple[str, ...]) -> dict[str, LayerPatch]:
    # A constant delta: what it adds does not matter here, only which weights the patch keeps.
    return {n: LayerPatch(module.get_submodule(n), [lambda w: torch.full_like(w, 0.5)]) for n in names}


def _weight_bytes(module: torch.nn.Module, names: tuple[str, ...]) -> int:
    return sum(
        module.get_submodule(n).weight.numel() * module.get_submodule(n).weight.element_size() for n in names
    )


def test_a_fused_patch_adds_its_kept_originals_to_the_ledger_until_it_comes_off(tmp_path: Path) -> None:
    path = save_stack(tmp_path / "s.safetensors", width=WIDTH)
    names = ("layers.0", "layers.2")
    with MemoryManager(MemoryConfig(device="cpu", policy="auto", data_dir=tmp_path)) as mm:
        handle = mm.register(spec_for(path, "stack", width=WIDTH))
        with mm.use(handle) as module:
            base_device, base_used = handle.device_bytes, mm.ledger.device_used()
            layers = _layers(module, names)
            patch = _weight_bytes(module, names)
            assert fused_bytes(layers) == patch == 2 * WIDTH * WIDTH * 4
            state = mm.patch(handle, layers, mode="fused", signature=("test",))
            assert state.extra_bytes() == patch
            assert handle.device_bytes == base_device + patch
            assert mm.ledger.device_used() == base_used + patch
            row = next(r for r in mm.report()["ledger"] if r["key"] == "stack")
            assert row["device_bytes"] == base_device + patch
        # Fused stays between uses (the next run with the same patches reuses it): still counted.
        assert patch_state(handle.module) is state and handle.device_bytes == base_device + patch
        with mm.use(handle):
            mm.unpatch(handle)
            assert handle.device_bytes == base_device
            assert mm.ledger.device_used() == base_used


def test_on_the_fly_patches_keep_nothing_in_the_ledger(tmp_path: Path) -> None:
    path = save_stack(tmp_path / "s.safetensors", width=WIDTH)
    with MemoryManager(MemoryConfig(device="cpu", policy="auto", data_dir=tmp_path)) as mm:
        handle = mm.register(spec_for(path, "stack", width=WIDTH))
        with mm.use(handle) as module:
            before = handle.device_bytes
            mm.patch(handle, _layers(module, ("layers.1",)), mode="on_the_fly", signature=("test",))
            assert handle.device_bytes == before
            module(torch.zeros(1, WIDTH))
            mm.unpatch(handle)
            assert handle.device_bytes == before


def test_room_for_a_fused_patch_is_made_under_the_policy(tmp_path: Path) -> None:
    """The copy a fused patch keeps is reserved like a load: `auto` evicts an idle model for it, `none`
    (nothing is ever evicted) refuses with the sizes."""
    big = save_stack(tmp_path / "big.safetensors", width=WIDTH)
    other = tmp_path / "other.safetensors"
    save_file(Stack(WIDTH, 4).state_dict(), other)
    names = ("head", "layers.0", "layers.1", "layers.2", "layers.3")
    weights = sum(t.numel() * 4 for t in Stack(WIDTH, 4).state_dict().values() if t.is_floating_point())
    weights += 4 * 8  # the int64 `steps` buffer
    # Room for both models, but not for both plus a copy of five of one model's layers.
    budget = 2 * weights + 2 * WIDTH * WIDTH * 4
    for policy in ("auto", "none"):
        config = MemoryConfig(device="cpu", policy=policy, ram_budget=str(budget), data_dir=tmp_path / policy)
        with MemoryManager(config) as mm:
            idle = mm.register(
                ComponentSpec("idle", "idle", "other", spec_for(other, "idle").build, (other,))
            )
            handle = mm.register(spec_for(big, "big", width=WIDTH))
            with mm.use(idle):
                pass
            with mm.use(handle) as module:
                layers = _layers(module, names)
                if policy == "none":
                    with pytest.raises(BudgetExceeded, match="fused weight patches of big"):
                        mm.patch(handle, layers, mode="fused", signature=("test",))
                    assert patch_state(module) is None and idle.location == "device"
                else:
                    mm.patch(handle, layers, mode="fused", signature=("test",))
                    assert idle.location == "disk"  # evicted to make room
                    assert mm.ledger.device_used() <= mm.ledger.device_budget
