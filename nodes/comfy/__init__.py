"""ComfyUI interoperability: import (API, UI, PNG), the node mapping, export, and the node types that
ComfyUI workflows need beyond Nodeloom's core set.

Modules: `node_types` (ZeroConditioning, SamplerAdvanced, ImageScale(By), LatentUpscale(By)),
`declarations` (ComfyUI's widget order per class), `graph` (the format-neutral ComfyUI graph),
`families` (family guesses from names and nodes),
`api_format`, `ui_format`, `sources` (files and PNG chunks), `mapping` (ComfyUI class -> our nodes),
`convert` (graph -> workflow, with the report), `export` (workflow -> API format).
Imports `nodes.*` and `pipelines.*`; nothing here imports Qt.
"""
