"""experiments/stopping.py: what each score pays for calling again instead of stopping, from a run
folder's logged rollouts, against numbers worked by hand."""
import json
import os

import pytest

from experiments import stopping

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CALL, ANSWER = "<tool_call>\n[]\n</tool_call>", "It is sunny."


def rollout(step, group, question, calls, process, summary, adv_tool, adv_sum):
    turns = [{"text": CALL, "calls": [], "observations": []}] * calls + [{"text": ANSWER, "calls": [], "observations": []}]
    return {"step": step, "group": group, "question": question, "turns": turns, "stop": "done", "process": process,
            "summary": summary, "score": process + summary, "adv_tool": adv_tool, "adv_sum": adv_sum}


def test_calling_again_against_stopping_by_hand(tmp_path, capsys):
    """Two groups of a single-step prompt (need 1) and one of an irrelevant prompt (need 0): the
    levels per k - need, and the group-paired difference (called again - stopped), each group's pairs
    averaged first; a group without both kinds gives no pair."""
    tasks = [json.loads(line) for line in open(f"{ROOT}/data/world/rl.jsonl")]
    single = next(t for t in tasks if t["extra_info"]["parallel_type"] == "single_step_single_tool")
    irr = next(t for t in tasks if t["extra_info"]["parallel_type"] == "irrelevant")
    with open(tmp_path / "rl.jsonl", "w") as f:
        f.writelines(json.dumps(t) + "\n" for t in (single, irr))
    (tmp_path / "config.json").write_text(json.dumps({"data": str(tmp_path / "rl.jsonl")}))
    qs, qi = (stopping.load_tasks(str(tmp_path / "rl.jsonl"))[i].question for i in (0, 1))
    rows = [rollout(1, 0, qs, 1, 1.0, 0.8, 0.5, 0.4), rollout(1, 0, qs, 1, 0.8, 0.6, 0.1, 0.0),   # stopped at 1
            rollout(1, 0, qs, 2, 0.7, 0.9, -0.2, 0.6),                                            # called again
            rollout(2, 1, qs, 1, 0.9, 0.5, 0.0, 0.0), rollout(2, 1, qs, 3, 0.5, 0.5, -1.0, 0.0),
            rollout(2, 2, qi, 0, 1.0, 1.0, 0.0, 0.0), rollout(2, 2, qi, 0, 1.0, 0.0, 0.0, -1.0)]  # no one called
    with open(tmp_path / "rollouts.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    got = stopping.rows_of([str(tmp_path)])
    assert [(r["kind"], r["need"], r["k"]) for r in got][:3] == [("single_step_single_tool", 1, 1)] * 2 + \
        [("single_step_single_tool", 1, 2)]
    levels = stopping.levels(got)
    assert levels[("single_step_single_tool", 0)]["n"] == 3 and levels[("single_step_single_tool", 2)]["n"] == 1
    assert levels[("single_step_single_tool", 1)]["share"] == 0.2
    assert levels[("single_step_single_tool", 0)]["process"] == pytest.approx(0.9)   # (1.0 + 0.8 + 0.9) / 3
    assert levels[("irrelevant", 0)]["summary"] == 0.5
    c = stopping.choice(got)
    assert set(c) == {"single_step_single_tool"}                      # the irrelevant group has no caller
    # group 0: process (0.7-1.0 + 0.7-0.8)/2 = -0.2; group 1: 0.5-0.9 = -0.4 -> mean -0.3, SE 0.1
    assert c["single_step_single_tool"]["process"] == pytest.approx((-0.3, 0.1, 2))
    # A_tool: group 0 (-0.7 + -0.3)/2 = -0.5, group 1 -1.0 -> -0.75 ± 0.25; A_sum: 0.4, 0.0 -> 0.2 ± 0.2
    assert c["single_step_single_tool"]["adv_tool"] == pytest.approx((-0.75, 0.25, 2))
    assert c["single_step_single_tool"]["adv_sum"] == pytest.approx((0.2, 0.2, 2))
    stopping.main([str(tmp_path)])
    out = capsys.readouterr().out
    assert "7 rollouts of 1 run(s)" in out and "| single_step_single_tool | 2 | -0.300 ± 0.100 |" in out


def test_a_rollout_of_another_data_file_is_refused_in_one_line(tmp_path):
    """A logged question that the run's RL data does not hold: one line naming the file and row."""
    (tmp_path / "config.json").write_text(json.dumps({"data": f"{ROOT}/data/world/rl.jsonl"}))
    (tmp_path / "rollouts.jsonl").write_text(json.dumps(rollout(1, 0, "not a shipped question", 1, 0.5, 0.5, 0, 0)) + "\n")
    with pytest.raises(SystemExit, match="rollouts.jsonl row 1: its question is not in the run's RL data"):
        stopping.rows_of([str(tmp_path)])


def test_blocks_by_hand():
    """The share of rollouts with two or more calls in one turn over the first and last third of the
    steps (a type not drawn in a third: None), and S_process / Success@0.9 with a block and without."""
    one, two = [{"name": "a"}], [{"name": "a"}, {"name": "b"}]
    turn = lambda calls: {"text": CALL, "calls": calls, "observations": []}  # noqa: E731
    rows = [{"kind": "single_step_parallel", "step": s, "turns": [turn(c)], "process": p}
            for s, c, p in [(0, one, 0.5), (0, two, 1.0), (1, one, 0.4), (2, two, 0.9), (2, two, 0.8)]]
    rows.append({"kind": "irrelevant", "step": 2, "turns": [], "process": 1.0})
    b = stopping.blocks(rows)
    assert b["single_step_parallel"]["first"] == 0.5 and b["single_step_parallel"]["last"] == 1.0
    n, proc, ok = b["single_step_parallel"]["block"]
    assert (n, ok) == (3, pytest.approx(2 / 3)) and proc == pytest.approx(0.9)
    assert b["single_step_parallel"]["split"] == (2, pytest.approx(0.45), 0.0)
    assert b["irrelevant"]["first"] is None and b["irrelevant"]["block"] == (0, None, None)


def test_stop_token_advantage_per_arm_by_hand(tmp_path):
    """--stop-token: the advantage each arm routes to the stop token, stopped at the gold's count minus called
    again inside a group: GRPO's Â recomputed from the scores (Eq. 6), SLCA's Â_sum, Eq. 15's Â_tool; a rollout
    without a summary has no stop token, and a group without both kinds gives no pair."""
    tasks = [json.loads(line) for line in open(f"{ROOT}/data/world/rl.jsonl")]
    single = next(t for t in tasks if t["extra_info"]["parallel_type"] == "single_step_single_tool")
    runs = {}
    for name, algo, credit in (("grpo", "grpo", "summary"), ("slca", "slca", "summary"), ("dec", "slca", "tool")):
        run = tmp_path / name
        run.mkdir()
        (run / "rl.jsonl").write_text(json.dumps(single) + "\n")
        (run / "config.json").write_text(json.dumps({"data": str(run / "rl.jsonl"), "algo": algo, "decision_credit": credit}))
        q = stopping.load_tasks(str(run / "rl.jsonl"))[0].question
        rows = [rollout(0, 0, q, 1, 1.0, 0.0, 0.9, -0.3), rollout(0, 0, q, 2, 0.5, 1.0, -0.9, 0.3),   # stopped, again
                rollout(0, 0, q, 2, 0.5, 0.0, -0.5, 0.0),                                             # again, no summary
                rollout(1, 0, q, 1, 1.0, 0.0, 0.2, 0.2), rollout(1, 0, q, 1, 0.0, 0.0, -0.2, -0.2)]   # no one called again
        rows[2]["turns"] = rows[2]["turns"][:-1]
        (run / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        runs[name] = str(run)
    gap = stopping.stop_gap(stopping.rows_of(list(runs.values())))
    # GRPO, group 0: scores 1.0, 1.5, 0.5: Â = (x - 1) / 0.5 (unbiased std 0.5): 0, +1, -1; stopped 0 - again +1
    assert gap["grpo"][runs["grpo"]][0] == pytest.approx(-1.0, abs=1e-5) and gap["grpo"]["pooled"][2] == 1
    assert gap["slca"][runs["slca"]][:1] == (-0.6,) and gap["slca-decision"][runs["dec"]][0] == pytest.approx(1.8)
    assert gap["slca"]["pooled"][1] is None  # one group: no SE
