"""Why the most used ComfyUI nodes that Nodeloom does not map are not mapped (shown by `app check`).

Lives here: `GAP_REASONS`. Pure data; imports nothing.

The classes are the largest gaps by usage in ComfyUI's published templates (benchmarks/comfy_templates.py);
a class not listed gets the generic reason. Each reason says what is missing here, so the user knows whether
a different node would do.
"""

from __future__ import annotations

GAP_REASONS: dict[str, str] = {
    "ManualSigmas": "a hand-written sigma list; Nodeloom's samplers take a named schedule",
    "BatchImagesNode": "batches pictures of different sources; not in this build",
    "SplitSigmas": "splits a schedule between samplers; use Sampler (Advanced) with start/end steps",
}
