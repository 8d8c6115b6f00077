"""LLM pipelines: load transformers folders and GGUF files, and run our own prefill/decode loop.

Modules: `gguf_loader` (GGUF -> config, float state dict, tokenizer), `gguf_cache` (convert once,
keep as safetensors), `hf_loader` (model folders, the pickle refusal, building the model),
`kv_cache` (a small wrapper with a byte figure), `sampling`, `generate` (prefill, decode_one_token,
decode_n_tokens, generate), `chat` (prompts and chat templates), `detokenize` (incremental text),
`runtime` (the glue to the memory manager the nodes use); for GGUF on a CPU, `packed_linear` (torch's int4/int8
matmuls on repacked blocks), `packed_model` (GGUF -> packed tensors -> decoder), `packed_cache` (repack once per
file and machine), `packed_runtime` (the ledger handle), `gguf_plan` (the measured `auto` rule, the packed
folders, a first repack's working memory from the header, without transformers) and `compact_model` (a small
Llama/Qwen/Gemma 3 decoder with a static cache); `batch_kv`, `scheduler`, `batch_runtime` (batched decoding);
`vision` (Qwen-VL folders: pictures into the prompt).
Imports transformers, tokenizers, gguf-py, safetensors and `memory`; never nodes/, app/ or Qt.
"""
