"""ComfyUI interoperability: import (API, UI, PNG), the node mapping, export, and the node types that
ComfyUI workflows need beyond Nodeloom's core set.

Modules: `node_types` (ZeroConditioning, SamplerAdvanced, ImageScale(By), LatentUpscale(By)),
`declarations` (ComfyUI's widget order per class), `graph` (the format-neutral ComfyUI graph),
`families` (family guesses from names and nodes), `family_check` (families this build cannot run),
`size_nodes` (ImageScaleToTotalPixels and the size arithmetic), `gaps` (why the largest gaps are unmapped),
`api_format`, `ui_format`, `sources` (files and PNG chunks), `mapping` (ComfyUI class -> our nodes),
`mapping_sampling` (custom sampling folded onto Sampler), `mapping_media` (video, switch, sizes,
primitives), `mapping_wan` (Wan image to video, CLIP vision), `wan_variants` (Wan models that run
elsewhere, for the family check), `mappers` (all tables merged),
`convert` (graph -> workflow, with the report), `export` (workflow -> API format).
Imports `nodes.*` and `pipelines.*`; nothing here imports Qt.
"""
