"""Sweeps: SPEC parsing, grid vs zip, ordering by loads, a failing job, Ctrl+C, report and contact sheet."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from PIL import Image

from app.main import main
from nodes.sweep import (
    SweepError,
    SweepJob,
    load_key,
    order_jobs,
    parse_axis,
    parse_spec,
    pick_next,
    plan_jobs,
)
from nodes.workflow import load_workflow

# Integration: in `make test`, out of the fast lane (`make test-fast`).
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
TXT2IMG = REPO / "resources/workflows/txt2img.json"
FAST = ["--set", "sampler.steps=3", "--threads", "1", "--quiet"]


# -- SPEC forms -----------------------------------------------------------------------------------------


def test_every_spec_form(tmp_path: Path) -> None:
    assert parse_spec("1,2,3", flag="f") == ["1", "2", "3"]
    assert parse_spec("1..4", flag="f") == [1, 2, 3, 4]
    assert parse_spec("4..1", flag="f") == [4, 3, 2, 1]
    assert parse_spec("10..1:-4", flag="f") == [10, 6, 2]
    assert parse_spec("0.5..1.5:0.25", flag="f") == [0.5, 0.75, 1.0, 1.25, 1.5]
    assert parse_spec("0.1..0.3:0.1", flag="f") == [0.1, 0.2, 0.3]  # no 0.30000000000000004
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a red circle\n\n  a blue square  \n")
    assert parse_spec(f"@{prompts}", flag="f") == ["a red circle", "a blue square"]


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ("a..b", "not a range"),
        ("1..5:0", "never gets"),
        ("1..5:-1", "never gets"),
        ("1,,2", "empty value"),
        ("", "empty value"),
        ("@/no/such/file.txt", "cannot read"),
        ("0..1e9", "at most"),
    ],
)
def test_bad_spec_names_the_flag(spec: str, reason: str) -> None:
    with pytest.raises(SweepError, match=reason) as info:
        parse_spec(spec, flag="--sweep sampler.seed=" + spec)
    assert str(info.value).startswith("--sweep sampler.seed=")


def test_values_take_the_parameters_type(registry) -> None:
    wf = load_workflow(TXT2IMG, registry)
    assert parse_axis("sampler.cfg=4,7", wf, registry).values == (4.0, 7.0)
    assert parse_axis("sampler.seed=1..3", wf, registry).values == (1, 2, 3)
    assert parse_axis("positive.text=a cat,a dog", wf, registry).values == ("a cat", "a dog")
    assert parse_axis("sampler.scheduler=euler,ddim", wf, registry).values == ("euler", "ddim")


@pytest.mark.parametrize(
    ("item", "reason"),
    [
        ("sampler.steps=0..2", "below the minimum"),
        ("sampler.scheduler=nope", "not one of"),
        ("sampler.seed=x", "expected seed"),
        ("sampler.sed=1", "no parameter 'sed'"),
        ("ghost.seed=1", "no node 'ghost'"),
        ("sampler.denoiser=1", "no parameter"),
        ("seed=1", "NODE.PARAM=SPEC"),
    ],
)
def test_bad_axis_names_flag_and_reason(registry, item: str, reason: str) -> None:
    wf = load_workflow(TXT2IMG, registry)
    with pytest.raises(SweepError, match=reason) as info:
        parse_axis(item, wf, registry)
    assert f"--sweep {item}" in str(info.value)


# -- planning -------------------------------------------------------------------------------------------


def test_grid_is_every_combination_and_zip_pairs(registry) -> None:
    wf = load_workflow(TXT2IMG, registry)
    seeds = parse_axis("sampler.seed=1..3", wf, registry)
    cfgs = parse_axis("sampler.cfg=2..6:2", wf, registry)
    grid = plan_jobs([seeds, cfgs])
    assert [tuple(j.values.values()) for j in grid] == [(s, c) for s in (1, 2, 3) for c in (2, 4, 6)]
    zipped = plan_jobs([seeds, cfgs], zip_axes=True)
    assert [tuple(j.values.values()) for j in zipped] == [(1, 2), (2, 4), (3, 6)]
    with pytest.raises(SweepError, match="as many"):
        plan_jobs([seeds, parse_axis("sampler.cfg=2,4", wf, registry)], zip_axes=True)
    with pytest.raises(SweepError, match="twice"):
        plan_jobs([seeds, seeds])


def test_jobs_sharing_models_run_back_to_back(registry) -> None:
    wf = load_workflow(TXT2IMG, registry)
    # The model varies fastest in plan order: A B A B ...; run order must be A A A B B B.
    axes = [
        parse_axis("sampler.seed=1..3", wf, registry),
        parse_axis("load.path=builtin:shapes-sd,demo:tiny-sd", wf, registry),
    ]
    jobs = plan_jobs(axes)
    keys = {j.index: load_key(wf, registry, j) for j in jobs}
    ordered = [j.values["load.path"] for j in order_jobs(jobs, keys)]
    assert ordered == ["builtin:shapes-sd"] * 3 + ["demo:tiny-sd"] * 3
    # A seed sweep never changes what is loaded: one key for every job.
    seeds = plan_jobs(axes[:1])
    assert len({load_key(wf, registry, j) for j in seeds}) == 1


def test_idle_worker_keeps_its_model_or_takes_the_model_nobody_is_on() -> None:
    pending = [SweepJob(i, {}) for i in range(4)]
    keys = {0: "A", 1: "A", 2: "B", 3: "B"}
    assert pick_next(pending, keys, last_key="B", busy_keys=[]) == 2
    assert pick_next(pending, keys, last_key=None, busy_keys=["A"]) == 2
    assert pick_next(pending, keys, last_key=None, busy_keys=[]) == 0


# -- running --------------------------------------------------------------------------------------------


def _report(path: Path) -> dict:
    return json.loads(path.read_text())


def test_seed_sweep_loads_each_model_once_and_a_failed_job_does_not_stop_it(tmp_path: Path) -> None:
    out = tmp_path / "out"
    # 60 is not a multiple of 8: that job fails inside EmptyLatent; the others go on.
    code = main(
        [
            "--run",
            str(TXT2IMG),
            "--out",
            str(out),
            "--sweep",
            "latent.width=64,60,72",
            "--sweep",
            "sampler.seed=7,8",
        ]
        + FAST
    )
    assert code == 1  # a job failed
    report = _report(out / "sweep.json")
    statuses = [(j["values"]["latent.width"], j["status"]) for j in report["jobs"]]
    assert statuses == [(64, "ok"), (64, "ok"), (60, "failed"), (60, "failed"), (72, "ok"), (72, "ok")]
    failed = report["jobs"][2]
    assert failed["failed_node"] == "latent" and "multiples of 8" in failed["error"]
    ok = [j for j in report["jobs"] if j["status"] == "ok"]
    for job in ok:
        (picture,) = job["outputs"]
        assert Path(picture).is_file() and f"j{job['index']:03d}" in Path(picture).name
        assert job["images"] == 1 and job["seconds"] > 0
    (worker,) = report["workers"]
    # Every model was loaded once across the six jobs: the worker kept them between jobs.
    assert worker["load_counts"] == {"text_encoder": 1, "unet": 1, "vae": 1}
    assert worker["memory"]["process_peak_rss"] > 0
    assert report["totals"]["images"] == 4 and report["totals"]["images_per_min"] > 0
    # Contact sheet: the HTML labels each picture by its values; the PNG is a table, widths down, seeds across.
    sheet = (out / "sweep.html").read_text()
    assert "width=64, seed=8" in sheet and "failed" in sheet
    with Image.open(out / "sweep.png") as png:
        assert png.size == (2 * 192, 3 * (192 + 14))


def test_different_seeds_give_different_pictures_and_same_seed_the_same(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["--run", str(TXT2IMG), "--out", str(out), "--sweep", "sampler.seed=5,6,5"] + FAST) == 0
    pictures = [Path(j["outputs"][0]) for j in _report(out / "sweep.json")["jobs"]]
    pixels = [Image.open(p).tobytes() for p in pictures]
    assert pixels[0] == pixels[2] and pixels[0] != pixels[1]


def test_ctrl_c_cancels_the_rest_and_keeps_what_finished(tmp_path: Path, monkeypatch) -> None:
    import app.batch.execute as batch_execute

    real = batch_execute.write_outputs

    def write_then_interrupt(result, out_dir):  # the user presses Ctrl+C once, when the first job is done
        real(result, out_dir)
        if result.index == 0:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(batch_execute, "write_outputs", write_then_interrupt)
    out = tmp_path / "out"
    code = main(["--run", str(TXT2IMG), "--out", str(out), "--sweep", "sampler.seed=1..5"] + FAST)
    assert code == 130
    report = _report(out / "sweep.json")
    assert report["cancelled"] is True
    assert report["jobs"][0]["status"] == "ok" and Path(report["jobs"][0]["outputs"][0]).is_file()
    assert {j["status"] for j in report["jobs"][1:]} <= {"cancelled", "skipped"}
    assert len(list(out.glob("txt2img-*.png"))) < 5
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_sweep_flag_errors_exit_2(tmp_path: Path, capsys) -> None:
    assert main(["--run", str(TXT2IMG), "--out", str(tmp_path), "--sweep", "sampler.cfg=1..2:-1"]) == 2
    assert "--sweep sampler.cfg=1..2:-1" in capsys.readouterr().err
    assert main(["--run", str(TXT2IMG), "--out", str(tmp_path), "--zip"]) == 2
    assert (
        main(["--run", str(TXT2IMG), "--out", str(tmp_path), "--sweep", "sampler.seed=1", "--workers", "2"])
        == 2
    )


def test_a_job_whose_model_file_is_missing_says_so_and_the_others_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    missing = tmp_path / "no-such-model.safetensors"
    code = main(
        ["--run", str(TXT2IMG), "--out", str(out), "--sweep", f"load.path={missing},builtin:shapes-sd"] + FAST
    )
    assert code == 1
    first, second = _report(out / "sweep.json")["jobs"]
    assert first["status"] == "failed" and f"has no file for: load.path = {missing}" in first["error"]
    assert second["status"] == "ok" and second["images"] == 1


def test_report_gives_images_per_minute_and_tokens_per_second_per_worker_and_in_total() -> None:
    from app.batch.report import SweepOutcome, build_report, summary_lines
    from app.batch.worker import JobResult

    results = [
        JobResult(0, {"gen.seed": 1}, "ok", "ray-0", seconds=4.0, images=1, tokens=120),
        JobResult(1, {"gen.seed": 2}, "ok", "ray-1", seconds=5.0, images=1, tokens=30),
        JobResult(2, {"gen.seed": 3}, "failed", "ray-1", seconds=1.0, error="boom"),
    ]
    workers = [{"worker": "ray-0", "device": "cpu"}, {"worker": "ray-1", "device": "cpu"}]
    report = build_report(
        SweepOutcome(results, workers, wall_seconds=10.0), workflow="wf.json", axes=[], zip_axes=False
    )
    assert report["totals"]["images_per_min"] == 12.0 and report["totals"]["tokens_per_s"] == 15.0
    per_worker = {w["worker"]: (w["images_per_min"], w["tokens_per_s"], w["jobs"]) for w in report["workers"]}
    assert per_worker == {"ray-0": (6.0, 12.0, 1), "ray-1": (6.0, 3.0, 2)}
    assert report["ok"] is False and report["counts"]["failed"] == 1
    text = "\n".join(summary_lines(report))
    assert "12.0 images/min, 15.0 tok/s" in text and "job 2 failed: boom" in text
