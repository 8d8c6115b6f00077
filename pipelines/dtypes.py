"""Which dtype a model computes in: one rule for every pipeline (the diffusion families and the LLM).

Lives here: `dtype_for_device`. May import: stdlib at module level; torch on first call (families.py imports
this module, and listing node types must not import torch).

"auto" is float32 on the CPU (bf16/fp16 are ~55x slower there: FINDINGS) and the model's usual half type on
CUDA (the type it is published in: `Family.cuda_dtype` for diffusion, `LLM_CUDA_DTYPE` for the LLM); any other
choice names the dtype itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def dtype_for_device(choice: str, device: torch.device | str, cuda_dtype: torch.dtype) -> torch.dtype:
    """ "auto" -> float32 on CPU, `cuda_dtype` on CUDA; "float32" / "float16" / "bfloat16" -> that type."""
    import torch

    if choice != "auto":
        return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[choice]
    if torch.device(device).type == "cuda":
        return cuda_dtype
    return torch.float32
