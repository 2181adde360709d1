"""Checkpoints and --resume: a run killed with SIGKILL (between steps, or while a checkpoint
is being written) and resumed ends with exactly the weights of an uninterrupted run (CPU,
one thread). Each case runs train.py in a child process, as a user would."""
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

from helpers import write_world

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARGS = ["--sft-limit", "8", "--sft-epochs", "1", "--eval-data", "", "--steps", "4", "--save-every", "1",
        "--group-size", "2", "--prompts-per-step", "2", "--mini-batch", "1", "--max-tokens", "40",
        "--max-turns", "2", "--tiny-size", "32", "1", "2", "--lr", "1e-3"]
# the child SIGKILLs itself after writing the weights of checkpoint 3, before the folder is renamed
KILL_IN_WRITE = """
import os, signal, sys, torch, train
save = torch.save
def dying_save(obj, path, *a, **k):
    save(obj, path, *a, **k)
    if str(path).endswith(os.path.join(".tmp-step-3", "state.pt")):
        os.kill(os.getpid(), signal.SIGKILL)
torch.save = dying_save
train.main(sys.argv[1:])
"""


def run(cmd, out, rl, sft, *extra):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ROOT}
    argv = ["--data", rl, "--sft-data", sft, "--out", str(out), *ARGS, *extra]
    return subprocess.Popen([sys.executable, *cmd, *argv], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def weights(out):
    return load_file(os.path.join(out, "final", "model.safetensors"))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("resume")
    rl, sft = write_world(tmp)
    p = run(["train.py"], tmp / "straight", rl, sft)
    log = p.communicate(timeout=300)[0]
    assert p.returncode == 0, log
    return tmp, rl, sft, weights(tmp / "straight")


def same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_sigkill_between_steps_then_resume_is_bit_exact(reference):
    tmp, rl, sft, want = reference
    out = tmp / "killed"
    p = run(["train.py"], out, rl, sft)
    deadline = time.time() + 300
    while not os.path.isdir(out / "ckpt" / "step-2") and p.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    p.send_signal(signal.SIGKILL)
    p.communicate()
    assert not os.path.isdir(out / "final")               # it really died mid-run
    p = run(["train.py"], out, rl, sft, "--resume")
    log = p.communicate(timeout=300)[0]
    assert p.returncode == 0, log
    assert "resumed from" in log
    assert same(weights(out), want)
    assert len(os.listdir(out / "ckpt")) <= 2              # --keep 2


@pytest.mark.slow
def test_sigkill_during_checkpoint_write_is_ignored_on_resume(reference):
    tmp, rl, sft, want = reference
    out = tmp / "torn"
    p = run(["-c", KILL_IN_WRITE], out, rl, sft)
    p.communicate(timeout=300)
    assert p.returncode == -signal.SIGKILL
    assert os.path.isdir(out / "ckpt" / ".tmp-step-3") and not os.path.isdir(out / "ckpt" / "step-3")
    p = run(["train.py"], out, rl, sft, "--resume")
    log = p.communicate(timeout=300)[0]
    assert p.returncode == 0, log
    assert "resumed from" in log and "step-2" in log
    assert same(weights(out), want)


def test_resume_with_another_config_names_the_keys(tmp_path):
    import train
    rl, sft = write_world(tmp_path)
    out = tmp_path / "run"
    out.mkdir()
    a = train.get_args(["--data", rl, "--sft-data", sft, "--out", str(out), *ARGS])
    import json
    (out / "config.json").write_text(json.dumps(vars(a)))
    with pytest.raises(SystemExit, match=r"--lr.*--seed|--seed.*--lr"):
        train.main(["--data", rl, "--sft-data", sft, "--out", str(out), *ARGS, "--lr", "5e-4", "--seed", "3",
                    "--resume"])


def test_a_rerun_never_truncates_an_earlier_run(tmp_path):
    import train
    rl, sft = write_world(tmp_path)
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.jsonl").write_text('{"step": 0}\n')
    with pytest.raises(SystemExit, match="--resume.*--overwrite"):
        train.main(["--data", rl, "--sft-data", sft, "--out", str(out), *ARGS])
    with pytest.raises(SystemExit):                        # a bad flag after that loses nothing either
        train.main(["--data", rl, "--out", str(out), "--group-size", "0"])
    assert (out / "metrics.jsonl").read_text() == '{"step": 0}\n'
