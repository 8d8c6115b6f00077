"""Nodeloom's node system: node types, the registry, workflow files and the executor. No Qt here.

Imports `pipelines` (through the diffusion and LLM node modules) and `memory`.
"""
