"""A Load LLM for each text encoder that a ComfyUI TextGenerate generates with.

Lives here: `LLM_OF_KEY`, `give_llm_loaders`, `llm_names`. Imports `nodes.comfy.graph`.

ComfyUI's TextGenerate runs the LLM inside the text encoder its `clip` input comes from (a CLIP loader's
single file: Qwen3, Gemma, ...). Our LLM Generate takes a Load LLM; the importer adds one per such loader
(`<loader>_llm`, the loader's file as its path) and records which loader it stands for in
`meta.comfyui.llm_of`, so that `app export-comfy` wires TextGenerate back to the loader and writes no node
for it. The file name came from the ComfyUI file, so it is recorded with the import's names (`llm_names`)
and confined to the models folders like theirs (nodes.model_names.IMPORTED_MODEL_PARAMS).
"""

from __future__ import annotations

from typing import Any

from nodes.comfy.graph import ComfyGraph

LLM_OF_KEY = "llm_of"


def give_llm_loaders(nodes: dict[str, dict[str, Any]], graph: ComfyGraph) -> dict[str, str]:
    """Rewires every LLM Generate fed by a text-encoder loader to a new Load LLM of the same file (added to
    `nodes`); returns Load LLM id -> the loader's id."""
    llm_of: dict[str, str] = {}
    for nid, data in list(nodes.items()):
        link = data["inputs"].get("llm") if data["type"] == "LLMGenerate" else None
        if not link:
            continue
        source = nodes.get(link[0])
        through_lora = source is not None and source["type"] == "LoadLoRA"
        while source is not None and source["type"] == "LoadLoRA" and source["inputs"].get("text_encoder"):
            link = source["inputs"]["text_encoder"]  # a LoRA on the text encoder: the loader under it
            source = nodes.get(link[0])
        if through_lora and source is not None:
            graph.note(graph.nodes.get(nid), "the LoRA on its text encoder is not applied to the LLM")
        if (
            source is None
            or source["type"] != "LoadTextEncoder"
            or not isinstance(source["params"].get("path"), str)
        ):
            del data["inputs"]["llm"]
            graph.note(
                graph.nodes.get(nid), "its clip input is not a text-encoder loader: connect a Load LLM"
            )
            continue
        llm_id = f"{link[0]}_llm"
        if llm_id not in nodes:
            nodes[llm_id] = {"type": "LoadLLM", "params": {"path": source["params"]["path"]}, "inputs": {}}
            llm_of[llm_id] = link[0]
            graph.note(
                graph.nodes.get(nid),
                f"runs on Load LLM {llm_id!r} of {source['params']['path']!r} (the text encoder file read as "
                "its LLM, one copy in memory for both)",
            )
        data["inputs"]["llm"] = [llm_id, "llm"]
    return llm_of


def llm_names(nodes: dict[str, dict[str, Any]], llm_of: dict[str, str]) -> dict[str, dict[str, str]]:
    """The added Load LLMs' file names, for `meta.comfyui.names`."""
    return {
        llm_id: {"path": nodes[llm_id]["params"]["path"]}
        for llm_id in llm_of
        if isinstance(nodes.get(llm_id, {}).get("params", {}).get("path"), str)
    }
