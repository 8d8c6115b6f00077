"""`app serve`: one process serving runs over HTTP and a websocket, ComfyUI-compatible where it can be.

Modules, one concept each: `options` (the serve options, the loopback and token rules), `jobs` (the
priority queue and the in-memory history), `comfy_shapes` (ComfyUI's JSON shapes: errors, history,
object_info), `messages` (executor events -> ComfyUI websocket messages), `prompts` (a request's graph ->
a runnable Workflow, names confined), `files` (uploads and /view inside their folders), `worker` (the one
run thread with the one executor and memory manager), `state` (what the handlers share, the websocket
publisher), `routes` (the ComfyUI and `/run` handlers, as one `ROUTES` table), `openai_chat` +
`openai_routes` (OpenAI's `/v1/chat/completions` on the LLM graph), `serve` (the application, its middlewares and `serve_command`),
`client` (a Qt-free client for a running server, for the editor's "Connect to server").
Imports `nodes`, `memory`, `pipelines`, `app.history_file`, aiohttp; never Qt.
"""
