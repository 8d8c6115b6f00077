"""Per-tensor lazy loading of checkpoints whose key layout differs from the module's (single files).

Lives here: `Recipe`, `KeyMap`, `header_stubs`, `trace_conversion`, `rename_key_map`, `align_key_map`,
`CheckpointSource`, `empty_module`, `lazy_load`.
May import: stdlib, torch, safetensors, accelerate, transformers, diffusers, memory.weights,
pipelines.diffusion.comfy_layouts.comfy_quant (which imports nothing of Nodeloom).

The key map comes from the header alone and from diffusers' own converters: we run a converter (e.g.
`convert_ldm_unet_checkpoint`) on a dict of *stubs*, meta tensors with each file tensor's name, shape and
dtype and no data. A stub records every torch op applied to it (`__torch_function__`), so each tensor the
converter returns carries a `Recipe`: which file keys it reads and the ops to replay on them (a rename is no
op; an attention split is a slice or `chunk`; a conv->linear reshape is `[:, :, 0, 0]`; a projection is
`.T.contiguous()`). Loading then reads one file tensor (memory-mapped), replays its ops, casts it and assigns
it into a module built on the meta device, one tensor at a time: no full state dict, no second copy.

    key_map = trace_conversion(path, lambda sd: convert_ldm_unet_checkpoint(sd, config), ("model.diffusion_model.",))
    unet = lazy_load(path, key_map, empty_module(lambda: UNet2DConditionModel.from_config(config)), torch.float32)

The same source object (`CheckpointSource`) is what the memory manager streams blocks from.

ComfyUI's quantized layers (`<layer>.comfy_quant` markers: int8 / int8 ConvRot, NVFP4, MXFP8, fp8) are
dequantized here, in `header_stubs`, so every loader that traces a file gets them: each quantized weight's
stub is one recorded op (`comfy_quant.dequantized_state`) over its stored tensor and scales, of the
dequantized (float32) shape, and the side tensors (scales, markers) are gone from the stubs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from memory.weights import cast, fill_empty, reopen_bytes, tensor_offsets
from pipelines.diffusion.comfy_layouts import comfy_quant

# safetensors dtype tags -> torch dtypes (format spec: https://github.com/huggingface/safetensors).
_TORCH_DTYPE: dict[str, torch.dtype] = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2, "I64": torch.int64, "I32": torch.int32,
    "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool,
    "F8_E8M0": torch.float8_e8m0fnu,  # MXFP8 block exponents
}  # fmt: skip


class _Stub(torch.Tensor):
    """A meta tensor that remembers how it was made: ("key", name) or ("op", func, args, kwargs, index)."""

    node: tuple[Any, ...]

    @staticmethod
    def __new__(cls, meta: torch.Tensor, node: tuple[Any, ...]) -> _Stub:
        stub = torch.Tensor._make_subclass(cls, meta)
        stub.node = node
        return stub

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*_plain(args), **_plain(kwargs))
        if isinstance(out, torch.Tensor):
            return _Stub(out, ("op", func, args, kwargs, None))
        if isinstance(out, tuple | list) and out and all(isinstance(o, torch.Tensor) for o in out):
            return type(out)(_Stub(o, ("op", func, args, kwargs, i)) for i, o in enumerate(out))
        return out  # shapes, dtypes, sizes: plain values


def _plain(x: Any) -> Any:
    if isinstance(x, _Stub):
        return x.as_subclass(torch.Tensor)
    if isinstance(x, tuple | list):
        return type(x)(_plain(v) for v in x)
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    return x


def _keys_of(node: tuple[Any, ...], out: set[str]) -> None:
    if node[0] == "key":
        out.add(node[1])
    elif node[0] == "op":
        for v in _walk(node[2]) + _walk(node[3]):
            _keys_of(v.node, out)


def _walk(x: Any) -> list[_Stub]:
    if isinstance(x, _Stub):
        return [x]
    if isinstance(x, tuple | list):
        return [s for v in x for s in _walk(v)]
    if isinstance(x, dict):
        return [s for v in x.values() for s in _walk(v)]
    return []


def _replay(node: tuple[Any, ...], raw: dict[str, torch.Tensor]) -> torch.Tensor:
    if node[0] == "key":
        return raw[node[1]]
    if node[0] == "const":
        return node[1]
    _, func, args, kwargs, index = node
    out = func(*_real(args, raw), **_real(kwargs, raw))
    return out if index is None else out[index]


def _real(x: Any, raw: dict[str, torch.Tensor]) -> Any:
    if isinstance(x, _Stub):
        return _replay(x.node, raw)
    if isinstance(x, tuple | list):
        return type(x)(_real(v, raw) for v in x)
    if isinstance(x, dict):
        return {k: _real(v, raw) for k, v in x.items()}
    return x


@dataclass(frozen=True)
class Recipe:
    """How one module tensor is made: the file keys it reads, the ops replayed on them, its result shape."""

    keys: tuple[str, ...]
    node: tuple[Any, ...]
    shape: tuple[int, ...]
    dtype: torch.dtype  # as stored (before the cast to the run dtype); float32 for a dequantized layer

    @property
    def is_rename(self) -> bool:
        return self.node[0] == "key"


KeyMap = dict[str, Recipe]  # module tensor name -> recipe


def header_stubs(path: Path, prefixes: tuple[str, ...] = ()) -> dict[str, torch.Tensor]:
    """A stub (meta tensor, no data) for every tensor in the file whose name starts with one of `prefixes`."""
    stubs: dict[str, torch.Tensor] = {}
    with safe_open(str(path), framework="pt") as f:
        for key in f.keys():
            if prefixes and not key.startswith(prefixes):
                continue
            sl = f.get_slice(key)
            meta = torch.empty(tuple(sl.get_shape()), dtype=_TORCH_DTYPE[sl.get_dtype()], device="meta")
            stubs[key] = _Stub(meta, ("key", key))
        markers = comfy_quant.read_markers(f, stubs, Path(path).name)
    if not markers:
        return stubs
    layers = comfy_quant.quant_layers(markers, stubs, Path(path).name)
    return comfy_quant.dequantized_state(stubs, layers, _recorded)


def _recorded(
    fn: Callable[..., torch.Tensor], args: tuple[Any, ...], kwargs: dict[str, Any], shape: tuple[int, ...]
) -> _Stub:
    """A float32 stub of `shape` made by `fn(*args, **kwargs)` from other stubs (replayed at load)."""
    return _Stub(torch.empty(shape, dtype=torch.float32, device="meta"), ("op", fn, args, kwargs, None))


def trace_conversion(
    path: Path,
    convert: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]],
    prefixes: tuple[str, ...] = (),
) -> KeyMap:
    """Run `convert` (original state dict -> diffusers state dict) on header stubs and record its recipes."""
    out: KeyMap = {}
    for name, t in convert(header_stubs(path, prefixes)).items():
        if isinstance(t, _Stub):
            keys: set[str] = set()
            _keys_of(t.node, keys)
            out[name] = Recipe(tuple(sorted(keys)), t.node, tuple(t.shape), t.dtype)
        else:  # made up by the converter (e.g. an identity projection): a constant, no file tensor
            out[name] = Recipe((), ("const", t.detach().cpu()), tuple(t.shape), t.dtype)
    return out


def rename_key_map(key_map: KeyMap, rename: Callable[[str], str]) -> KeyMap:
    return {rename(name): recipe for name, recipe in key_map.items()}


def align_key_map(key_map: KeyMap, module: torch.nn.Module, path: Path) -> KeyMap:
    """Drop entries for the module's non-persistent buffers, then check names and shapes against `module`.

    Old CLIP checkpoints carry `position_ids`, which the module makes itself (diffusers skips them too).
    """
    state = module.state_dict(keep_vars=True)
    buffers = {name for name, _ in module.named_buffers()}
    kept = {name: r for name, r in key_map.items() if name in state or name not in buffers}
    CheckpointSource(path, kept).check(module)
    return kept


class CheckpointSource:
    """A `memory.weights.WeightSource` over one safetensors file and a key map.

    Reads each tensor memory-mapped, replays its recipe and casts it; file tensors shared by consecutive
    names (q/k/v split from one `in_proj_weight`) are read once. The file handle is reopened every
    eighth of each request (`memory.weights.reopen_bytes`), so pages already converted leave RSS.
    """

    def __init__(self, path: Path, key_map: KeyMap) -> None:
        self.path = Path(path)
        self.key_map = key_map
        self._offsets: dict[str, tuple[int, int]] | None = None

    def names(self) -> list[str]:
        return list(self.key_map)

    def nbytes(self, dtype: torch.dtype) -> int:
        return sum(
            _numel(r.shape) * (dtype if r.dtype.is_floating_point else r.dtype).itemsize
            for r in self.key_map.values()
        )

    def load(self, names: Sequence[str], dtype: torch.dtype) -> Iterator[tuple[str, torch.Tensor]]:
        handle = None
        since = 0
        raw: dict[str, torch.Tensor] = {}
        reopen = reopen_bytes(sum(_stored_bytes(self.key_map[n]) for n in names if n in self.key_map))
        try:
            for name in names:
                recipe = self.key_map.get(name)
                if recipe is None:
                    raise KeyError(f"{self.path.name}: no tensor for {name!r}")
                raw = {k: v for k, v in raw.items() if k in recipe.keys}
                if handle is None or (since >= reopen and not raw):
                    if handle is not None:
                        handle.__exit__(None, None, None)
                    handle = safe_open(str(self.path), framework="pt").__enter__()
                    since = 0
                for k in recipe.keys:
                    if k not in raw:
                        raw[k] = handle.get_tensor(k)
                        since += raw[k].numel() * raw[k].element_size()
                t = cast(_replay(recipe.node, raw), dtype)
                if tuple(t.shape) != recipe.shape:
                    raise ValueError(
                        f"{self.path.name}: {name} has shape {tuple(t.shape)}, expected {recipe.shape}"
                    )
                yield name, t
        finally:
            raw.clear()
            if handle is not None:
                handle.__exit__(None, None, None)

    def file_ranges(self, names: Sequence[str]) -> list[tuple[Path, int, int]]:
        """Where the file keys `names` read lie in the file (streaming drops those pages after a block)."""
        if self._offsets is None:
            self._offsets = tensor_offsets(self.path)
        keys = {k for n in names if n in self.key_map for k in self.key_map[n].keys}
        return [(self.path, *self._offsets[k]) for k in sorted(keys)]

    def check(self, module: torch.nn.Module) -> None:
        """Raise with the file's name if the key map and the module disagree on names or shapes."""
        state = module.state_dict(keep_vars=True)
        missing = [n for n in state if n not in self.key_map and state[n].is_meta]
        unexpected = [n for n in self.key_map if n not in state]
        wrong = [
            f"{n} {self.key_map[n].shape} vs {tuple(state[n].shape)}"
            for n in self.key_map
            if n in state and tuple(state[n].shape) != self.key_map[n].shape
        ]
        if missing or unexpected or wrong:
            raise ValueError(
                f"{self.path.name} does not match {type(module).__name__}: missing {missing[:3]} "
                f"({len(missing)}), unexpected {unexpected[:3]} ({len(unexpected)}), shapes {wrong[:3]}"
            )


def _stored_bytes(r: Recipe) -> int:
    return _numel(r.shape) * r.dtype.itemsize


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def empty_module(factory: Callable[[], torch.nn.Module]) -> torch.nn.Module:
    """`factory()` with its parameters on the meta device (no memory), in eval mode as `from_pretrained` sets.

    Buffers stay real: non-persistent ones (CLIP's position ids) are made by the constructor, not loaded.
    """
    from accelerate import init_empty_weights
    from transformers.initialization import no_init_weights

    # Random init of meta tensors is wasted work (2 s for CLIP-L's normal_ calls): skip it, as from_pretrained does.
    with init_empty_weights(), no_init_weights():
        module = factory()
    return module.eval()


def lazy_load(path: Path, key_map: KeyMap, module: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """Fill an empty (meta) `module` from `path` per `key_map`, one tensor at a time, at `dtype`."""
    source = CheckpointSource(path, key_map)
    source.check(module)
    fill_empty(module, source, dtype)
    return module


# Original-layout markers per diffusers class name, and the diffusers converter that reads that layout.
_UNET_PREFIX = "model.diffusion_model."
_ORIGINAL_LAYOUTS: dict[str, tuple[str, str]] = {
    "UNet2DConditionModel": ("input_blocks.", "convert_ldm_unet_checkpoint"),
    "AutoencoderKL": ("encoder.down.", "convert_ldm_vae_checkpoint"),
    "FluxTransformer2DModel": ("double_blocks.", "convert_flux_transformer_checkpoint_to_diffusers"),
    "SD3Transformer2DModel": ("joint_blocks.", "convert_sd3_transformer_checkpoint_to_diffusers"),
}


def component_key_map(path: Path, model_class: type, config: dict[str, Any]) -> KeyMap | None:
    """The key map of a file holding one component, in diffusers or original layout; None if unknown.

    Diffusers names map to themselves; an original layout (told apart by a marker in its key names) goes
    through diffusers' converter for that class. None: a layout we can't map (the caller falls back to
    `from_single_file`, which reads the file whole).
    """
    from diffusers.loaders import single_file_utils

    with safe_open(str(path), framework="pt") as f:
        keys = list(f.keys())
    layout = _ORIGINAL_LAYOUTS.get(model_class.__name__)
    if layout is None or not any(layout[0] in k for k in keys):
        return trace_conversion(path, dict)  # diffusers names already
    convert = getattr(single_file_utils, layout[1])
    if layout[1] == "convert_ldm_unet_checkpoint":
        # A standalone UNet may lack the full checkpoint's prefix, which this converter selects by.
        return trace_conversion(
            path,
            lambda sd: convert(
                {k if k.startswith(_UNET_PREFIX) else _UNET_PREFIX + k: v for k, v in sd.items()}, config
            ),
        )
    if layout[1] == "convert_ldm_vae_checkpoint":
        return trace_conversion(path, lambda sd: convert(sd, config))
    return trace_conversion(path, convert)
