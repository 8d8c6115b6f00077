"""The tiling choices of VAE passes, as names only (no torch), so node types can list them.

Lives here: `TILING_CHOICES`. May import: nothing. The tiling itself: pipelines.diffusion.tiled_vae.
"""

TILING_CHOICES: tuple[str, ...] = ("auto", "on", "off")
