"""Bad workflow files: every problem is a validation error naming the file (exit 2), in a short message."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import pytest
from PIL import Image

from app.main import main
from nodes.png import PNG_WORKFLOW_KEY, save_png_with_workflow
from nodes.workflow import WorkflowError, load_workflow, workflow_from_dict
from nodes.workflow_json import MAX_FILE_BYTES

REPO = Path(__file__).resolve().parent.parent
TEXT_DEMO = REPO / "resources/workflows/text_demo.json"


def _demo() -> dict:
    return json.loads(TEXT_DEMO.read_text())


def _run(path: Path, tmp_path: Path, capsys) -> tuple[int, str]:
    code = main(["--run", str(path), "--out", str(tmp_path / "out"), "--quiet"])
    return code, capsys.readouterr().err


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


BAD_FILES: dict[str, bytes] = {
    "deep.json": _nested(1000).encode(),
    "deep_meta.json": TEXT_DEMO.read_text()
    .replace('"meta": {', f'"meta": {{"x": {_nested(700)},', 1)
    .encode(),
    "latin1.json": TEXT_DEMO.read_text().replace("Hello", "H\u00e9llo").encode("latin-1"),
    "utf16.json": TEXT_DEMO.read_text().encode("utf-16"),
    "random.json": bytes(range(256)) * 4,
    "random.png": b"\x00\x01garbage" * 100,
    "empty.json": b"",
    "truncated.json": TEXT_DEMO.read_bytes()[:300],
}
EXPECTED = {
    "deep.json": "nested 1,000 levels deep",
    "deep_meta.json": "nested",
    "latin1.json": "not UTF-8",
    "utf16.json": "UTF-16",
    "random.json": "not UTF-8",
    "random.png": "not a PNG image",
    "empty.json": "empty",
    "truncated.json": "not valid JSON",
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_unreadable_files_exit_2_with_a_message_naming_the_file(tmp_path, capsys, name) -> None:
    path = tmp_path / name
    path.write_bytes(BAD_FILES[name])
    code, err = _run(path, tmp_path, capsys)
    assert code == 2
    assert "Traceback" not in err
    assert name in err and EXPECTED[name] in err
    assert len(err.encode()) < 2048


def test_a_png_renamed_json_is_read_by_its_content(tmp_path, capsys) -> None:
    png = tmp_path / "image.json"
    save_png_with_workflow(Image.new("RGB", (4, 4)), png, _demo())
    assert load_workflow(png, _registry()).nodes["save"].type == "SaveText"


def _registry():
    from nodes.registry import default_registry

    return default_registry(entry_point_packs=False)


def _png_with_chunk(path: Path, chunk_type: bytes, data: bytes) -> Path:
    """A PNG with a hand-made text chunk inserted before IDAT."""
    Image.new("RGB", (2, 2)).save(path)
    raw = path.read_bytes()
    at = raw.index(b"IDAT") - 4
    chunk = len(data).to_bytes(4, "big") + chunk_type + data
    chunk += zlib.crc32(chunk_type + data).to_bytes(4, "big")
    path.write_bytes(raw[:at] + chunk + raw[at:])
    return path


def test_a_png_whose_workflow_chunk_is_a_decompression_bomb(tmp_path, capsys) -> None:
    # Past the text limit, which is a workflow file's (PIL's own 1 MiB chunk limit is no longer used).
    bomb = zlib.compress(b" " * (MAX_FILE_BYTES + 10))
    data = PNG_WORKFLOW_KEY.encode() + b"\0\x01\0\0\0" + bomb  # iTXt: compressed, no language, no key
    path = _png_with_chunk(tmp_path / "bomb.png", b"iTXt", data)
    code, err = _run(path, tmp_path, capsys)
    assert code == 2 and "bomb.png" in err and "decompresses to more than" in err


def test_a_png_whose_embedded_workflow_is_broken_json_says_so(tmp_path, capsys) -> None:
    data = PNG_WORKFLOW_KEY.encode() + b"\0\0\0\0\0" + b'{"format": "nodeloom.workflow", "nodes": {'
    path = _png_with_chunk(tmp_path / "broken.png", b"iTXt", data)
    code, err = _run(path, tmp_path, capsys)
    assert code == 2 and "broken.png" in err and "embedded workflow is damaged" in err


def test_duplicate_keys_are_an_error_naming_the_key(tmp_path, capsys) -> None:
    text = TEXT_DEMO.read_text().replace('"version": 1,', '"version": 2, "version": 1,', 1)
    path = tmp_path / "dup.json"
    path.write_text(text)
    code, err = _run(path, tmp_path, capsys)
    assert code == 2 and "'version' appears twice" in err and "dup.json" in err
    # A node defined twice: the first used to be dropped silently.
    nodes_at = text.index('"nodes": {') + len('"nodes": {')
    twice = text[:nodes_at] + '"save": {"type": "ShowText", "inputs": {}},' + text[nodes_at:]
    path.write_text(twice.replace('"version": 2, "version": 1,', '"version": 1,'))
    code, err = _run(path, tmp_path, capsys)
    assert code == 2 and "'save' appears twice" in err


@pytest.mark.parametrize("version", [1.5, "1", True, 0])
def test_a_node_version_must_be_a_whole_number(version) -> None:
    data = _demo()
    data["nodes"]["save"]["version"] = version
    with pytest.raises(WorkflowError) as caught:
        workflow_from_dict(data, _registry(), source="v.json")
    (problem,) = caught.value.problems
    assert (problem.node, problem.field) == ("save", "version")


@pytest.mark.parametrize("where", ["node_id", "text", "meta"])
def test_a_lone_surrogate_is_refused_at_validation(tmp_path, capsys, where) -> None:
    data = _demo()
    if where == "node_id":
        data["nodes"]["gr\ud800eeting"] = data["nodes"].pop("greeting")
    elif where == "text":
        data["nodes"]["greeting"]["params"]["text"] = "bad \udc80 text"
    else:
        data["meta"]["title"] = "\ud83d"
    path = tmp_path / "surrogate.json"
    path.write_text(json.dumps(data))  # ensure_ascii: the surrogate is written as a \\uXXXX escape
    code, err = _run(path, tmp_path, capsys)
    assert code == 2 and "surrogate" in err
    assert not (tmp_path / "out").exists()  # nothing ran


@pytest.mark.parametrize("prefix", ["", "..", "a/b", "x" * 300, "bad\ud800"])
def test_an_invalid_save_prefix_is_refused_at_validation(prefix) -> None:
    data = _demo()
    data["nodes"]["save"]["params"]["prefix"] = prefix
    with pytest.raises(WorkflowError) as caught:
        workflow_from_dict(data, _registry(), source="p.json")
    assert any(p.node == "save" and p.field == "prefix" for p in caught.value.problems)


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400", "1" + "0" * 30])
def test_non_finite_and_absurd_numbers_are_refused(tmp_path, capsys, number) -> None:
    text = TEXT_DEMO.read_text().replace('"version": 1,', f'"version": 1, "x": {number},', 1)
    path = tmp_path / "num.json"
    path.write_text(text)
    code, err = _run(path, tmp_path, capsys)
    assert code == 2 and "num.json" in err and "Traceback" not in err


def test_huge_values_are_quoted_short(tmp_path, capsys) -> None:
    data = _demo()
    huge = "x" * (10 * 2**20)
    data["nodes"]["save"]["inputs"]["text"] = [huge, "text"]
    data["nodes"][huge[:5000]] = {"type": huge}
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(data))
    code, err = _run(path, tmp_path, capsys)
    assert code == 2
    assert len(err.encode()) < 2048
    assert "10,485,760 characters" in err  # the full length is still said


def test_many_problems_keep_the_message_short() -> None:
    data = _demo()
    for i in range(2000):
        data["nodes"][f"n{i}"] = {"type": "Nope", "params": {}}
    with pytest.raises(WorkflowError) as caught:
        workflow_from_dict(data, _registry(), source="many.json")
    assert len(caught.value.problems) == 2000
    message = str(caught.value)
    assert len(message.encode()) < 2048 and "more" in message


def test_a_huge_format_width_is_refused_at_validation(tmp_path, capsys) -> None:
    data = _demo()
    data["nodes"]["fmt"] = {"type": "FormatText", "params": {"template": "{a:>200000000}"}, "inputs": {}}
    path = tmp_path / "width.json"
    path.write_text(json.dumps(data))
    code, err = _run(path, tmp_path, capsys)
    assert code == 2 and "200,000,000" in err and "'template'" in err
    assert not (tmp_path / "out").exists()


def test_format_text_bounds_what_a_wired_template_can_produce() -> None:
    from pipelines.text_limits import MAX_FORMAT_OUTPUT, format_template

    with pytest.raises(ValueError, match="over the limit"):
        format_template("{a:>200000000}", {"a": "", "b": "", "c": ""})
    with pytest.raises(ValueError, match="nested"):
        format_template("{a:>{b}}", {"a": "", "b": "999999999", "c": ""})
    with pytest.raises(ValueError, match="over the limit"):
        format_template("{a}" * 100, {"a": "x" * (MAX_FORMAT_OUTPUT // 50), "b": "", "c": ""})
    assert format_template("{a:>5}|{b}", {"a": "x", "b": "y", "c": ""}) == "    x|y"


class _Ctx:
    def __init__(self) -> None:
        self.logs: list[str] = []
        self.memory = None

    def log(self, message: str) -> None:
        self.logs.append(message)


def test_a_huge_diffusion_prompt_is_cut_before_tokenising_and_says_so(monkeypatch) -> None:
    import nodes.diffusion as diffusion_nodes
    import pipelines.diffusion.conditioning as conditioning
    from pipelines.text_limits import DIFFUSION_PROMPT_CHARS

    seen: list[int] = []
    # The node imports encode_prompt when it runs (listing node types stays light): patch it at its source.
    monkeypatch.setattr(conditioning, "encode_prompt", lambda mm, ref, text, **kw: seen.append(len(text)))
    ctx = _Ctx()
    huge = "a red square, " * 250_000  # 3.5 M characters
    diffusion_nodes.TextEncode(text_encoder=None, text=huge).run(ctx)
    assert seen == [DIFFUSION_PROMPT_CHARS]
    (note,) = ctx.logs
    assert "3,500,000 characters" in note and "cut" in note


def test_a_huge_llm_prompt_is_refused_before_tokenising() -> None:
    from types import SimpleNamespace

    from nodes.llm import LLMGenerate

    llm = SimpleNamespace(context_length=8192, name="tiny.gguf")  # no tokenizer: reaching it would fail
    with pytest.raises(ValueError, match=r"3,500,000 characters cannot fit tiny\.gguf's context"):
        LLMGenerate(llm=llm, prompt="x" * 3_500_000, max_new_tokens=8).run(_Ctx())
