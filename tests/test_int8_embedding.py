"""An int8 embedding table is looked up row by row: a prompt never upcasts the whole table (CLIP's 49408 x 768
would be a 152 MiB float copy per forward), and the rows match the dequantized table's.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from pipelines.quant.int8 import apply_int8


class _Largest(TorchDispatchMode):
    """Records the largest floating tensor any op makes while active."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204 - torch's hook
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, tuple | list) else (out,):
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                self.largest = max(self.largest, t.numel())
        return out


def test_int8_embedding_looks_up_rows_without_upcasting_the_table() -> None:
    torch.manual_seed(0)
    table = torch.nn.Embedding(4096, 64)
    reference = table.weight.detach().clone()
    model = torch.nn.Sequential(table)
    apply_int8(model, torch.float32)
    assert table.weight.dtype == torch.int8
    ids = torch.tensor([[0, 7, 4095, 7]])
    with torch.no_grad(), _Largest() as seen:
        rows = model(ids)
    assert seen.largest < table.weight.numel() // 16  # the rows asked for (4 x 64), never the table
    dequantized = table.weight.float() * table.weight_scale
    torch.testing.assert_close(rows, dequantized[ids])  # same arithmetic on the same rows: exact up to fp32
    # int8 per-row absmax: each value within half a step (amax / 127 / 2) of the float weight.
    step = reference.abs().amax(dim=1, keepdim=True) / 127.0
    assert ((rows[0] - reference[ids[0]]).abs() <= step[ids[0]] / 2 + 1e-6).all()
