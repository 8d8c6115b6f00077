"""The LLM families as HF folders: each loads through `open_llm` (what Load LLM runs) and its greedy tokens and
chat-template prompt ids equal transformers' on the same weights."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from memory import MemoryConfig, MemoryManager
from pipelines.llm.chat import build_prompt_ids
from pipelines.llm.runtime import GenerationRequest, generate_text, open_llm
from pipelines.llm.sampling import SamplingParams
from tests.llm_families import FAMILIES, write_family_folder

pytestmark = pytest.mark.slow  # builds and runs models

REQUEST = GenerationRequest(
    prompt="hello there", system_prompt="be brief", max_new_tokens=16, sampling=SamplingParams(), seed=0
)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_folder_greedy_and_chat_ids_match_transformers(tmp_path: Path, family: str) -> None:
    folder = tmp_path / family
    model = write_family_folder(family, folder)
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}]
    want_ids = list(
        tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)[
            "input_ids"
        ]
    )
    with MemoryManager(MemoryConfig(device="cpu", policy="none")) as mm, torch.no_grad():
        llm = open_llm(mm, folder)
        assert (
            build_prompt_ids(llm.tokenizer, REQUEST.prompt, system_prompt=REQUEST.system_prompt) == want_ids
        )
        ours = generate_text(mm, llm, REQUEST).result.tokens
    # Same weights, same float32 kernels (transformers' own model runs in both): exact token equality.
    out = model.generate(
        torch.tensor([want_ids]), max_new_tokens=16, do_sample=False, eos_token_id=model.config.eos_token_id
    )
    theirs = out[0, len(want_ids) :].tolist()
    assert ours == theirs
    assert len(set(theirs)) >= 4  # a varied answer, so equal tokens mean the same model ran
