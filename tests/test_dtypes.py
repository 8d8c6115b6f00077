"""The dtype a model computes in (pipelines.dtypes): float32 on the CPU, the model's half type on CUDA, for
the diffusion families and the LLM alike. Runs without a GPU: a device is only named, never used."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from gguf import GGMLQuantizationType

from memory import ComponentSpec
from pipelines.diffusion.families import FAMILIES, resolve_dtype
from pipelines.dtypes import dtype_for_device
from pipelines.llm.runtime import LLM_CUDA_DTYPE, open_llm
from tests.llm_fixtures import tiny_llama, write_tiny_gguf


def test_auto_is_float32_on_the_cpu_and_the_half_type_on_cuda() -> None:
    for half in (torch.float16, torch.bfloat16):
        assert dtype_for_device("auto", "cpu", half) == torch.float32
        assert dtype_for_device("auto", torch.device("cpu"), half) == torch.float32
        assert dtype_for_device("auto", "cuda", half) == half
        assert dtype_for_device("auto", torch.device("cuda", 1), half) == half


@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16"])
def test_a_named_dtype_is_used_on_every_device(name: str) -> None:
    for device in ("cpu", "cuda:0"):
        assert dtype_for_device(name, device, torch.float16) == getattr(torch, name)


def test_the_diffusion_families_follow_the_same_rule() -> None:
    for family in FAMILIES.values():
        assert resolve_dtype("auto", family, "cuda") == dtype_for_device("auto", "cuda", family.cuda_dtype)
        assert resolve_dtype("auto", family, "cpu") == torch.float32


class _Registrar:
    """Stands in for a MemoryManager on `device`: records what `open_llm` registers (registration is lazy,
    so nothing is built or moved, and no GPU is needed to see the choice)."""

    def __init__(self, device: str) -> None:
        self.device = torch.device(device)
        self.specs: list[ComponentSpec] = []

    def register(self, spec: ComponentSpec) -> Any:
        self.specs.append(spec)
        return SimpleNamespace(weight_bytes=None)

    def reserve_working(self, nbytes: int, what: str) -> None:  # the first GGUF conversion's budget
        pass

    def release_working(self, what: str) -> None:
        pass


@pytest.mark.parametrize("keep_quantized", [False, True])
def test_the_llm_runs_bfloat16_on_cuda_and_float32_on_the_cpu(tmp_path: Path, keep_quantized: bool) -> None:
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(tiny_llama(), path, GGMLQuantizationType.Q8_0)
    on_cuda, on_cpu = _Registrar("cuda"), _Registrar("cpu")
    cuda_llm = open_llm(on_cuda, path, keep_quantized=keep_quantized)  # type: ignore[arg-type]
    cpu_llm = open_llm(on_cpu, path, keep_quantized=keep_quantized)  # type: ignore[arg-type]
    assert LLM_CUDA_DTYPE == torch.bfloat16
    assert cuda_llm.dtype == on_cuda.specs[0].dtype == torch.bfloat16
    assert cpu_llm.dtype == on_cpu.specs[0].dtype == torch.float32
    # The KV cache is budgeted in the same dtype: bfloat16 holds it in half the bytes.
    assert cuda_llm.kv_bytes(64) * 2 == cpu_llm.kv_bytes(64) > 0
