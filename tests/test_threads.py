"""lib/runs/threads.py: the thread count follows the load, and train.py logs the count each step ran on."""
import json
import os
import subprocess
import sys
import time
import types

import torch

import lib.runs.threads as threads
import train
from helpers import write_world

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOY = ["--tiny-size", "32", "1", "2", "--sft-epochs", "1", "--sft-batch", "1", "--steps", "2", "--group-size", "2",
       "--prompts-per-step", "1", "--mini-batch", "1", "--max-tokens", "24", "--max-turns", "2", "--eval-data", "",
       "--show", "0"]


def test_fit_rounds_the_cores_left_between_one_and_the_start_count():
    assert threads.fit(2, 2, 0.0) == 2 and threads.fit(2, 2, 0.3) == 2     # idle, or a little background work
    assert threads.fit(2, 2, 0.7) == 1 and threads.fit(2, 2, 1.0) == 1     # one core taken
    assert threads.fit(2, 2, 2.0) == 1 and threads.fit(8, 16, 3.0) == 8    # never 0, never above the start
    assert threads.fit(8, 8, 3.0) == 5


def test_machine_reads_this_machines_cpus():
    cpus, busy = threads.machine()
    assert cpus >= 1 and busy > 0


class Clock:
    """A fake machine: the wall clock, this process's CPU time and the others' busy cores, all set by hand."""

    def __init__(self, monkeypatch, others):
        self.t, self.mine, self.others, self.busy = 0.0, 0.0, others, 0.0
        monkeypatch.setattr(threads.time, "monotonic", lambda: self.t)
        monkeypatch.setattr(threads, "own", lambda: self.mine)
        monkeypatch.setattr(threads, "machine", lambda: (2, self.busy))

    def tick(self, seconds, mine):  # `seconds` pass; this process uses `mine` cores of them
        self.t += seconds
        self.mine += mine * seconds
        self.busy += (mine + self.others) * seconds


def test_two_readings_in_a_row_change_the_count_and_it_comes_back(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    torch.set_num_threads(2)
    try:
        c = Clock(monkeypatch, others=1.0)
        t = threads.Threads()
        assert t.on and t.update() == 2
        c.tick(1.0, 1.0)
        assert t.update() == 2                 # under `every` seconds: no reading
        c.tick(1.5, 1.0)
        assert t.update() == 2                 # one reading says 1
        c.tick(2.0, 1.0)
        assert t.update() == 1                 # the second says so again
        c.others = 0.0
        c.tick(2.0, 1.0)
        assert t.update() == 1
        c.tick(2.0, 1.0)
        assert t.update() == 2                 # idle again, twice: back to the start count
        c.others = 1.0
        c.tick(2.0, 2.0)
        c.others = 0.0
        c.tick(2.0, 2.0)
        assert t.update() == 2                 # one busy interval alone changes nothing
        monkeypatch.setattr(threads, "machine", lambda: None)
        c.tick(2.0, 2.0)
        assert t.update() == 2 and not t.on    # /proc/stat gone mid-run: the count stays, nothing raises
    finally:
        torch.set_num_threads(1)


def test_a_fixed_count_is_left_alone(monkeypatch):
    torch.set_num_threads(2)
    try:
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
        assert not threads.Threads().on                        # the user's choice (and torchrun's)
        monkeypatch.delenv("OMP_NUM_THREADS")
        assert not threads.Threads(on=False).on                # train.py: off a CPU device
        monkeypatch.setattr(threads, "machine", lambda: None)
        assert not threads.Threads().on                        # no /proc/stat
    finally:
        torch.set_num_threads(1)
    assert not threads.Threads().on                            # started on one thread (the tests)


def test_train_drops_to_one_thread_beside_a_busy_process(tmp_path, monkeypatch):
    """The user's command at toy size, in this process, on a fake machine where another
    process keeps one of the two cores busy: the first SFT steps run on two threads, the
    rest of the run on one, and every SFT and RL row says which."""
    rl, sft = write_world(tmp_path)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "EVERY", 0.0)
    seen, real_own = {}, threads.own

    def monotonic():  # the reading's clock, remembered so the machine's busy time is read at the same instant
        seen["t"] = time.monotonic()
        return seen["t"]

    def machine():  # the others keep one core busy: their busy seconds are the wall clock's
        seen["own"] = real_own()
        return 2, seen["own"] + seen["t"]

    # One instant per reading: os.times' 10 ms ticks or a preemption between two reads cannot skew a ~15 ms step.
    monkeypatch.setattr(threads, "time", types.SimpleNamespace(monotonic=monotonic))
    monkeypatch.setattr(threads, "machine", machine)
    monkeypatch.setattr(threads, "own", lambda: seen["own"])
    torch.set_num_threads(2)
    try:
        train.main(["--data", rl, "--sft-data", sft, *TOY, "--out", str(tmp_path / "run")])
    finally:
        torch.set_num_threads(1)
    rows = [json.loads(x) for x in open(tmp_path / "run" / "metrics.jsonl")]
    rl_rows = [r for r in rows if "score" in r]
    counts = [r["threads"] for r in rows]
    assert len(rl_rows) == 2 and len(counts) == len(rows) > 4
    assert counts[:2] == [2, 2] and set(counts[2:]) == {1}, counts


def test_train_py_logs_a_fixed_thread_count(tmp_path):
    """The user's command as a process: with OMP_NUM_THREADS set the count is that, in every row."""
    rl, sft = write_world(tmp_path)
    subprocess.run([sys.executable, "train.py", "--data", rl, "--sft-data", sft, *TOY, "--out", str(tmp_path / "run")],
                   cwd=ROOT, capture_output=True, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    rows = [json.loads(x) for x in open(tmp_path / "run" / "metrics.jsonl")]
    assert len(rows) > 2 and [r["threads"] for r in rows] == [1] * len(rows)
