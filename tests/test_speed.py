"""tools/speed.py, the command docs/speed.md runs: both samplers at toy size (greedy ids equal, the table
printed), and `--split` on a run's metrics.jsonl."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def speed(*argv):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-m", "tools.speed", *argv], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_both_samplers_at_toy_size():
    rows = [line.split() for line in speed("--models", "tiny", "--rounds", "1", "--prompts", "1", "--group-size", "2",
                                           "--max-tokens", "8", "--max-turns", "2").splitlines()]
    table = [r for r in rows if r and r[0] == "tiny"]
    assert [r[2] for r in table] == ["single-turn", "multi-turn", "single-turn", "multi-turn"]  # as made, then the table
    assert all(r[-1] == "yes" for r in table)                                                    # greedy ids equal


def test_the_size_rule_both_ways_at_toy_size():
    """`--rule`: both ways timed, the bytes `pays` weighs (2 prompts x G = 2, hidden 32, 1 layer, 2 heads: one
    kv head of 16 floats, 128 bytes an id's keys and values; 1 other row a prompt reads its prefix again)."""
    out = speed("--rule", "--models", "tiny", "--rounds", "1", "--prompts", "2", "--group-size", "2", "--ids", "3")
    line, = [x for x in out.splitlines() if x.startswith("tiny:")]
    assert "shared / one block" in line and line.endswith("the rule picks one block (SHARE_BYTES 4 MiB)")
    lo, hi = map(int, line.split(" ids x G=")[0].split("of ")[1].split("-"))
    assert f"saves {128 * (lo - 1 + hi - 1) / 2**20:.2f} MiB" in line


def test_split_reads_a_runs_step_times(tmp_path):
    with open(tmp_path / "metrics.jsonl", "w") as f:
        for t in (1.0, 3.0, 2.0):
            f.write(json.dumps({"t_rollout": t, "t_logprobs": 1.0, "t_train": 2.0, "rollout_tok_s": 10.0}) + "\n")
    out = speed("--split", str(tmp_path))
    assert "3 RL steps" in out and "median 2.0 s" in out and "median 5.0 s" in out


@pytest.mark.real_model
def test_smol_sampling_on_smollm2_from_its_wheel():
    """`--smol GGUF`, the sampling measurement docs/speed.md quotes, at toy size (1 prompt x G = 2, 3 ids)."""
    from test_real_model import GGUF
    out = speed("--smol", GGUF, "--rounds", "1", "--prompts", "1", "--group-size", "2", "--ids", "3")
    assert "round 0:" in out and "6 ids" in out and "2 rows x 3 ids, bfloat16, --sampler cached" in out
