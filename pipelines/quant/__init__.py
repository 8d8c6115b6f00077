"""Quantized and split model files: 8-bit weight storage, GGUF diffusion models, separate component files.

Lives here (one module per concept): `storage` (the precision choices and how a module is put in them),
`int8` (per-channel weight-only int8 hooks), `meta_load` (building a module on the meta device and filling
it tensor by tensor), `detect` (what a file is, from its tensor names and shapes), `layouts` (public
releases' key layouts), `split` (the split-file loaders), `gguf_files` (reading and writing GGUF diffusion
files), `demo_split` (the tiny Flux split set). May import: stdlib, torch, safetensors, gguf, diffusers,
transformers, accelerate, memory, pipelines.paths, pipelines.diffusion.
"""
