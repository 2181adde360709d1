"""train.py --report-to: the TensorBoard events, read back, hold exactly the rows of metrics.jsonl
(SFT and RL) and eval.jsonl, at float32 (TensorBoard stores a scalar as one), also after a
--resume cut the logs back to a checkpoint and appended to them; W&B (offline) only where wandb
is installed, else one line at start naming the flag."""
import importlib.util
import json
import shutil

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import train
from helpers import write_world
from runs import ARGS

HAS_WANDB = importlib.util.find_spec("wandb") is not None


def f32(x):
    import numpy
    return float(numpy.float32(x))


def from_logs(out):
    """{name: [(step, value)]} as the flag's help names them, from the JSONL logs."""
    want = {}

    def add(name, step, row):
        for k, v in row.items():
            if isinstance(v, dict):
                add(f"{name}/{k}", step, v)
            elif isinstance(v, (int, float)):                              # not null, not a string
                want.setdefault(f"{name}/{k}", []).append((step, f32(v)))
    rows = [json.loads(x) for x in open(out / "metrics.jsonl")]
    sft = [r for r in rows if r.get("stage") == "sft"]
    for i, r in enumerate(sft):
        add("sft", i, {k: v for k, v in r.items() if k != "stage"})
    for r in rows:
        if "step" in r:
            add("rl", r["step"], {k: v for k, v in r.items() if k != "step"})
    for r in map(json.loads, open(out / "eval.jsonl")):
        add("eval", r["step"], {k: v for k, v in r.items() if k not in ("step", "label")})
    return want


def from_events(out):
    ea = EventAccumulator(str(out / "tensorboard"), size_guidance={"scalars": 0})
    ea.Reload()
    return {t: [(e.step, e.value) for e in ea.Scalars(t)] for t in ea.Tags()["scalars"]}


@pytest.mark.slow
def test_tensorboard_events_hold_the_logs_rows_also_after_resume(tmp_path):
    rl, sft = write_world(tmp_path)
    out = tmp_path / "run"
    argv = ["--data", rl, "--sft-data", sft, "--out", str(out), *ARGS, "--steps", "2", "--eval-data", rl,
            "--eval-limit", "2", "--report-to", "tensorboard"]
    train.main(argv)
    first = from_logs(out)
    assert from_events(out) == first
    assert [s for s, _ in first["rl/score"]] == [0, 1] and len(first["sft/loss"]) == 1
    assert [s for s, _ in first["eval/all/success"]] == [0, 2]                  # before RL, after RL
    shutil.rmtree(out / "final")                                               # as a kill after checkpoint 1 leaves it
    train.main([*argv, "--resume"])                                            # cuts the logs back to step 1
    again = from_logs(out)
    assert from_events(out) == again and again.keys() == first.keys()
    assert [s for s, _ in again["rl/score"]] == [0, 1] and again["rl/score"][0] == first["rl/score"][0]


def test_wandb_not_installed_is_one_line_naming_the_flag(capsys):
    if HAS_WANDB:
        pytest.skip("wandb is installed")
    with pytest.raises(SystemExit) as e:
        train.get_args(["--report-to", "wandb"])
    assert e.value.code == 2 and "--report-to wandb: wandb is not installed" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(not HAS_WANDB, reason="wandb is not installed (not a requirement)")
def test_wandb_offline_run_is_written(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    rl, sft = write_world(tmp_path)
    out = tmp_path / "run"
    train.main(["--data", rl, "--sft-data", sft, "--out", str(out), *ARGS, "--steps", "2", "--report-to", "wandb"])
    import wandb
    wandb.teardown()                          # waits for wandb's service, which writes the file after finish()
    runs = sorted((out / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 1
    data = runs[0].read_bytes()                                               # protobuf records: names in the clear
    assert all(name in data for name in (b"sft/loss", b"rl/score", b"rl/step"))
