"""Model code: loaders, denoising loops and LLM generation over diffusers/transformers models.

Imports `memory` only (never `nodes`, `app` or Qt).
"""
