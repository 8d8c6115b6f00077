"""Build a model on the meta device and fill it tensor by tensor, each cast once to how it is kept.

Lives here: `build_from_tensors`, `match_names`. May import: stdlib, torch, accelerate, pipelines.quant.

The one loading function of the split-file and quantized loaders (kept in one place so it can be unified
with the single-file loader's lazy per-tensor reader later). The module is created with
`accelerate.init_empty_weights` (parameters on meta, buffers real: rotary tables and position ids are
computed, not stored), put in its storage format while still empty (fp8/int8 hooks decide each layer's
dtype), then every tensor from the file is cast straight to its parameter's dtype and assigned. The file's
tensors are memory-mapped, so no full-precision copy of the model ever exists: peak is the stored model
plus one tensor.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import torch

from memory.release import malloc_trim
from pipelines.quant.int8 import is_int8_layer, load_int8_weight
from pipelines.quant.storage import apply_storage

# Float bytes read between two `malloc_trim` calls while building (see `build_from_tensors`): a trim costs
# about a millisecond, a 540 MB UNet then trims 17 times.
_TRIM_BYTES = 32 * 2**20


class WeightMismatchError(ValueError):
    """A file's tensors don't fit the model its config describes (wrong family, config or file)."""


def match_names(file_keys: Iterable[str], module_names: Iterable[str]) -> dict[str, str]:
    """file key -> module tensor name. Equal names win; else the file key with leading dotted parts stripped
    ("text_model." in old CLIP files, "model.diffusion_model." in checkpoints), else a module name ending in
    ".key" (transformers 5 saves CLIP without `text_model.`). Keys that match nothing are left out."""
    names = set(module_names)
    by_suffix: dict[str, list[str]] = {}
    for n in names:
        parts = n.split(".")
        for i in range(1, len(parts)):
            by_suffix.setdefault(".".join(parts[i:]), []).append(n)
    out: dict[str, str] = {}
    for key in file_keys:
        parts = key.split(".")
        stripped = next(
            (".".join(parts[i:]) for i in range(len(parts)) if ".".join(parts[i:]) in names), None
        )
        if stripped is not None:
            out[key] = stripped
        elif len(by_suffix.get(key, [])) == 1:
            out[key] = by_suffix[key][0]
    return out


def build_from_tensors(
    make: Callable[[], torch.nn.Module],
    tensors: Mapping[str, torch.Tensor],
    *,
    compute_dtype: torch.dtype,
    storage: str = "",
    source: str = "",
) -> torch.nn.Module:
    """`make()` under meta init, weights from `tensors` (names as in the module, or matched by suffix).

    Raises `WeightMismatchError` naming `source` when a tensor's shape differs or the module is left with
    missing weights. Tied parameters (T5's shared embedding) stay tied.
    """
    from accelerate import init_empty_weights

    with init_empty_weights(include_buffers=False):
        model = make()
    if any(p.is_floating_point() and p.dtype != compute_dtype for p in model.parameters()):
        model.to(dtype=compute_dtype)  # still empty: sets each floating parameter's target dtype
    if storage == "gguf":
        # Quantized Linear weights stay the file's blocks; GGUFLinear dequantizes one layer per call.
        from pipelines.quant.gguf_files import largest_dequantized_bytes, replace_gguf_linears

        replace_gguf_linears(model, tensors, compute_dtype)
        model._nodeloom_upcast_bytes = largest_dequantized_bytes(tensors, compute_dtype)
    else:
        apply_storage(model, storage, compute_dtype)  # 8-bit layers now have 8-bit (empty) weights
    # Every (module, attribute) that shares a parameter, so a tied weight is assigned everywhere at once.
    owners: dict[int, list[tuple[torch.nn.Module, str]]] = {}
    slots: dict[str, tuple[torch.nn.Module, str, bool]] = {}
    for mod_name, mod in model.named_modules():
        for attr, p in mod._parameters.items():
            if p is not None:
                owners.setdefault(id(p), []).append((mod, attr))
                slots[f"{mod_name}.{attr}" if mod_name else attr] = (mod, attr, True)
        for attr, b in mod._buffers.items():
            if b is not None and attr not in mod._non_persistent_buffers_set:
                slots[f"{mod_name}.{attr}" if mod_name else attr] = (mod, attr, False)
    names = match_names(tensors.keys(), slots)
    # An 8-bit build keeps only its small float tensors (norms, biases, skipped layers) as read: copied, so
    # none keeps its file mapping alive with the pages read through it (measured: +67 MiB of file-backed RSS
    # across the SD-shaped model's three int8 components, for a few MiB of kept tensors).
    copy = bool(storage) and storage != "gguf"
    since_trim = 0
    for key, name in names.items():
        mod, attr, is_param = slots[name]
        current = mod._parameters[attr] if is_param else mod._buffers[attr]
        if since_trim >= _TRIM_BYTES:
            # Quantizing leaves each tensor's float temporaries freed between the kept int8 weights; glibc
            # keeps them in its heap (measured: +300 MiB of anonymous RSS while building a 540 MB UNet in
            # int8), so a component would briefly cost what its float copy does. Trimmed as we go instead.
            malloc_trim()
            since_trim = 0
        t = tensors[key]
        since_trim += t.numel() * t.element_size()
        shape = tuple(getattr(t, "quant_shape", t.shape))  # GGUF: the dequantized shape
        if shape != tuple(current.shape):
            raise WeightMismatchError(
                f"{source}: tensor {key!r} has shape {shape}, the model wants {tuple(current.shape)} "
                "(a different model size or family than the config: pick the family or a config folder)"
            )
        if attr == "weight" and is_int8_layer(mod):
            load_int8_weight(mod, t)
            continue
        if not is_param:
            mod._buffers[attr] = t.to(current.dtype, copy=copy) if t.is_floating_point() else t
            continue
        if isinstance(t, torch.nn.Parameter):  # a GGUFParameter: keep its class (it carries the quant type)
            param = t
        else:
            param = torch.nn.Parameter(
                t.to(current.dtype, copy=copy) if t.is_floating_point() else t, requires_grad=False
            )
        for owner, owner_attr in owners[id(current)]:
            owner._parameters[owner_attr] = param
    if callable(getattr(model, "tie_weights", None)):
        # transformers 5 ties at load time (T5: encoder.embed_tokens <- shared), not when the module is built.
        model.tie_weights()
        # An int8 layer tied to another shares its weight, so it shares the scales too.
        scales = {
            id(m.weight): m.weight_scale
            for m in model.modules()
            if is_int8_layer(m) and not m.weight_scale.is_meta
        }
        for m in model.modules():
            if is_int8_layer(m) and m.weight_scale.is_meta and id(m.weight) in scales:
                m.weight_scale = scales[id(m.weight)]
    missing = [n for n, (m, a, p) in slots.items() if (m._parameters[a] if p else m._buffers[a]).is_meta]
    if missing:
        raise WeightMismatchError(
            f"{source}: {len(missing)} weights of the model are not in the file (first: {missing[:3]}); "
            "is it the right component and family?"
        )
    # The full-precision tensors read from the file were freed one by one; hand their pages back to the OS.
    malloc_trim()
    return model.eval()
