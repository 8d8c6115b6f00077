"""Tiny in-house Stable-Diffusion-format text-to-image model trained on synthetic shape scenes.

``scenes`` defines the world (palette, shapes, caption grammar, renderer, held-out triples),
``tokenizer`` builds the offline CLIP tokenizer, ``train_vae`` / ``train_unet`` are the two training
stages, ``train`` runs them all and exports ``resources/models/shapes-sd``, and ``evaluate`` judges
generated pictures with pixel statistics (``measure_scene`` / ``score``).

This package may import only torch, diffusers, transformers, tokenizers, PIL, numpy and ``memory``,
never ``nodes``, ``app`` or Qt. Importing the package itself is cheap (no torch import here).
"""
