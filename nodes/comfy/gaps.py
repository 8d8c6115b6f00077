"""Why the most used ComfyUI nodes that Nodeloom does not map are not mapped (shown by `app check`).

Lives here: `GAP_REASONS`. Pure data; imports nothing.

The classes are the largest gaps by usage in ComfyUI's published templates (benchmarks/comfy_templates.py);
a class not listed gets the generic reason. Each reason says what is missing here, so the user knows whether
a different node would do.
"""

from __future__ import annotations

GAP_REASONS: dict[str, str] = {
    "ComfyMathExpression": "computes a value at run time; Nodeloom has no expression node yet",
    "GetImageSize": "reads a picture's size at run time; Nodeloom has no image-size node yet",
    "VAEDecodeAudio": "decodes audio latents; Nodeloom runs no audio model",
    "ManualSigmas": "a hand-written sigma list; Nodeloom's samplers take a named schedule",
    "SaveImageAdvanced": "bit depth and colour-space options; use Save Image (8-bit sRGB PNG)",
    "ResizeImageMaskNode": "resizes an image and its mask together; use Scale Image on each",
    "BatchImagesNode": "batches pictures of different sources; not in this build",
    "ImageCompare": "an editor widget comparing two pictures; not in this build",
    "SplitSigmas": "splits a schedule between samplers; use Sampler (Advanced) with start/end steps",
}
