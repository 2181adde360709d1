"""Shared by test_resume.py and test_run_folder.py: train.py at toy size in a child process, as a
user runs it, at one thread (OMP_NUM_THREADS=1), where a resumed run is bit-identical to an
uninterrupted one (test_resume.py's docstring says why only there), and the uninterrupted
reference run each of those files compares against."""
import json
import os
import signal
import subprocess
import sys
import time

import torch
from safetensors.torch import load_file

from helpers import write_world

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
THREADS = "1"  # where a resumed run is bit-identical whatever else the machine runs (module docstring)

ARGS = ["--sft-limit", "8", "--sft-epochs", "1", "--eval-data", "", "--steps", "4", "--save-every", "1",
        "--group-size", "2", "--prompts-per-step", "2", "--mini-batch", "1", "--max-tokens", "40",
        "--max-turns", "2", "--tiny-size", "32", "1", "2", "--lr", "1e-3"]
# the child sends itself a signal: `SIGTERM step-1` during RL step 1, `SIGINT sft` as SFT starts,
# `sleep step-1` sleeps in RL step 1 (a long step to kill from outside)
SIGNAL_ITSELF = """
import os, signal, sys, time, train
what, at = sys.argv[1:3]
rl_step, warm_start = train.rl_step, train.warm_start
def step(*args, **kw):
    if at == f"step-{kw['step']}":
        print("in", at, flush=True)
        time.sleep(300) if what == "sleep" else os.kill(os.getpid(), getattr(signal, what))
    return rl_step(*args, **kw)
def sft(*args):
    if at == "sft":
        os.kill(os.getpid(), getattr(signal, what))
    return warm_start(*args)
train.rl_step, train.warm_start = step, sft
train.main(sys.argv[3:])
"""


def run(cmd, out, rl, sft, *extra):
    env = {**os.environ, "OMP_NUM_THREADS": THREADS, "PYTHONPATH": ROOT}
    argv = ["--data", rl, "--sft-data", sft, "--out", str(out), *ARGS, *extra]
    return subprocess.Popen([sys.executable, *cmd, *argv], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def killed_then_resumed(out, rl, sft, *extra, bare=False):
    """SIGKILL a run once checkpoint 2 is on disk, check it died mid-run, then --resume it to the end
    (`bare`: as `train.py --out OUT --resume` alone, its config read back from OUT/config.json):
    the resumed run's log."""
    p = run(["train.py"], out, rl, sft, *extra)
    deadline = time.time() + 300
    while not os.path.isdir(os.path.join(out, "ckpt", "step-2")) and p.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    p.send_signal(signal.SIGKILL)
    p.communicate()
    assert not os.path.isdir(os.path.join(out, "final"))               # it really died mid-run
    p = run(["train.py"], out, rl, sft, *extra, "--resume") if not bare else subprocess.Popen(
        [sys.executable, "train.py", "--out", str(out), "--resume"], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, env={**os.environ, "OMP_NUM_THREADS": THREADS, "PYTHONPATH": ROOT})
    log = p.communicate(timeout=300)[0]
    assert p.returncode == 0, log
    assert "resumed from" in log
    return log


def weights(out):
    return load_file(os.path.join(out, "final", "model.safetensors"))


def reference(tmp_path_factory):
    """An uninterrupted run in a fresh folder: (folder, rl path, sft path, its final weights)."""
    tmp = tmp_path_factory.mktemp("resume")
    rl, sft = write_world(tmp)
    p = run(["train.py"], tmp / "straight", rl, sft)
    log = p.communicate(timeout=300)[0]
    assert p.returncode == 0, log
    return tmp, rl, sft, weights(tmp / "straight")


def same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def logged(out):
    """(SFT lines, RL steps) of metrics.jsonl, and the steps of rollouts.jsonl."""
    rows = [json.loads(x) for x in open(os.path.join(out, "metrics.jsonl"))]
    rolls = [json.loads(x)["step"] for x in open(os.path.join(out, "rollouts.jsonl"))]
    return sum(r.get("stage") == "sft" for r in rows), [r["step"] for r in rows if "step" in r], sorted(set(rolls)), len(rolls)
