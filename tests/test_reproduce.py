"""experiments/ paper, noise, turn and misattribution end to end on a toy size: SFT start per seed, every
algorithm from it, the table and plots; experiments/common.py's tests and readings by hand."""
import json
from pathlib import Path

import pytest

from experiments import common, misattribution, noise, paper, turn, value_reading
from tools import make_world

ROOT = Path(__file__).resolve().parent.parent


def toy_world(folder):
    """A few rows of the shipped world's generator (a small --scale)."""
    paths = {}
    for name, rows in make_world.generate(0, scale=0.01).items():
        paths[name] = folder / f"{name}.jsonl"
        paths[name].write_text("".join(json.dumps(r) + "\n" for r in rows))
    return ["--data", str(paths["rl"]), "--eval-data", str(paths["eval"]), "--sft-data", str(paths["sft"])]


def test_compare_runs_every_algorithm_from_one_sft_start_per_seed(tmp_path, capsys):
    out = tmp_path / "rep"
    res = paper.main(["--size", "toy", "--jobs", "1", "--seeds", "0", "1", "--out", str(out), "--"] + toy_world(tmp_path))
    assert list(res) == list(paper.ALGOS)
    for seed in (0, 1):
        start = out / f"sft-s{seed}" / "sft"
        assert (start / "config.json").exists()
        configs = []
        for name in paper.ALGOS:
            run = out / f"{name}-s{seed}"
            cfg = json.loads((run / "config.json").read_text())
            # RL only, from the seed's SFT start
            assert cfg["model"] == str(start) and cfg["sft_data"] == "" and cfg["steps"] == 2
            assert (run / "final").is_dir() and not (run / "sft").exists()
            configs.append({k: v for k, v in cfg.items() if k not in ("algo", "hierr_weights", "no_sgls", "grad_cosine", "out")})
        assert all(c == configs[0] for c in configs)  # the same steps, prompts, G, lr and budgets
        assert len({json.dumps(common.evals(out / f"{n}-s{seed}")["before RL"]) for n in paper.ALGOS}) == 1
    assert json.loads((out / "grpo-s0" / "config.json").read_text())["algo"] == "grpo"
    assert json.loads((out / "no-hierr-s1" / "config.json").read_text())["hierr_weights"] == [0.0] * 5
    table = (out / "table.md").read_text()
    assert "| SFT start |" in table and "| toolpo |" in table and " ± " in table and "wall time" in table
    assert "kept from earlier" not in table
    assert (out / "curves.png").stat().st_size > 1000 and (out / "demo.png").stat().st_size > 1000
    assert len(res["slca"]["curves"][1]) == 2  # one point per RL step
    assert "wall time" in capsys.readouterr().out
    # a second call keeps the finished runs
    paper.main(["--size", "toy", "--jobs", "1", "--seeds", "0", "--algos", "slca", "--out", str(out), "--"] + toy_world(tmp_path))
    assert "kept" in capsys.readouterr().out
    assert "2 of 2 runs kept from earlier" in (out / "table.md").read_text()  # its wall time measured no run


def test_noise_mode_runs_slca_and_grpo_per_level(tmp_path):
    out = tmp_path / "noise"
    res = noise.main(["0", "0.5", "--size", "toy", "--seeds", "0", "--out", str(out), "--"]
                         + toy_world(tmp_path))
    assert sorted(res) == ["grpo", "grpo@0.5", "slca", "slca@0.5"]  # p = 0 is the comparison's run
    cfg = json.loads((out / "slca@0.5-s0" / "config.json").read_text())
    assert cfg["judge_noise"] == 0.5 and cfg["grad_cosine"] is True
    assert json.loads((out / "slca-s0" / "config.json").read_text())["judge_noise"] == 0.0
    assert all(m.get("grad_cosine") is not None for m in common.curves(out / "grpo@0.5-s0"))
    assert (out / "slca@0.5-s0.log").exists()  # --jobs 2 (the default): each run in its own process
    assert (out / "noise.png").exists() and "grad cosine" in (out / "noise.md").read_text()
    assert not (out / "table.md").exists()


def test_bonus_mode_runs_slca_and_grpo_per_k_from_one_sft_start(tmp_path):
    """--bonus: one world per K (the same SFT file), one SFT start per seed, SLCA and GRPO on
    each K; the table holds the marked prompts' redundant-call rate and the falsifier lines."""
    out = tmp_path / "bonus"
    res = misattribution.main(["--size", "toy", "--jobs", "1", "--seeds", "0", "--bonus", "0", "1", "--world-scale",
                          "0.1", "--out", str(out), "--", "--eval-limit", "40", "--prompts-per-step", "4",
                          "--mini-batch", "2"])
    assert sorted(res) == ["grpo-k0", "grpo-k1", "slca-k0", "slca-k1"]
    assert (out / "world-k0" / "sft.jsonl").read_bytes() == (out / "world-k1" / "sft.jsonl").read_bytes()
    cfg = json.loads((out / "slca-k1-s0" / "config.json").read_text())
    assert cfg["model"] == str(out / "sft-s0" / "sft") and cfg["data"].endswith("world-k1/rl.jsonl")
    assert json.loads((out / "grpo-k0-s0" / "config.json").read_text())["algo"] == "grpo"
    r = res["grpo-k1"]
    assert all(x is not None for x in r["before"]["redundant"] + r["after"]["redundant"])  # marked eval prompts
    assert any(t for t in r["train"])  # the sampled rate, from rollouts.jsonl
    text = (out / "bonus.md").read_text()
    assert "redundant call before -> after" in text and "Falsifiers" in text and "pooled" in text
    assert (out / "bonus.png").stat().st_size > 1000


def test_powered_mode_runs_k0_and_k2_on_half_marked_prompts_from_the_bonus_sft_start(tmp_path, capsys):
    """--powered: the half-marked worlds at K = 0, 2 (the same prompts, all marked rows of a larger
    world and as many unmarked; a marked-only eval), SLCA and GRPO from the SFT start --bonus makes,
    and the pre-registered reading: primary measure, falsifiers, manipulation check, credit gap."""
    out = tmp_path / "powered"
    res = misattribution.main(["--size", "toy", "--jobs", "1", "--seeds", "0", "1", "--powered", "--world-scale", "0.05",
                          "--out", str(out), "--", "--eval-limit", "6", "--prompts-per-step", "8", "--mini-batch", "4",
                          "--steps", "3"])
    assert sorted(res) == ["grpo-half-k0", "grpo-half-k2", "slca-half-k0", "slca-half-k2"]
    rl = {k: [json.loads(x) for x in (out / f"world-half-k{k}" / "rl.jsonl").read_text().splitlines()] for k in (0, 2)}
    marked = [r for r in rl[2] if "bonus_call" in r["extra_info"]]
    assert 2 * len(marked) == len(rl[2]) and len(rl[2]) > 2 * 0.147 * 600 * 0.05  # half marked, from a larger world
    assert [r["prompt"] for r in rl[0]] == [r["prompt"] for r in rl[2]]          # K changes only the reference
    ev = (out / "world-half-k2" / "eval.jsonl").read_text().splitlines()
    assert ev and all("bonus_call" in json.loads(x)["extra_info"] for x in ev)
    cfg = json.loads((out / "grpo-half-k2-s1" / "config.json").read_text())
    assert cfg["model"] == str(out / "sft-s1" / "sft") and cfg["data"].endswith("world-half-k2/rl.jsonl")
    assert json.loads((out / "sft-s0" / "config.json").read_text())["data"].endswith("world-k0/rl.jsonl")  # --bonus's
    assert all(x is not None for x in res["grpo-half-k2"]["last"])  # pooled from rollouts.jsonl
    text = (out / "powered.md").read_text()
    for part in ("Primary: marked training rollouts", "grpo +", "Manipulation check", "(a) grpo:", "(b) slca against grpo:",
                 "Credit gap at the decision token, slca-half-k2", "wall time"):
        assert part in text, part
    assert "wall time" in capsys.readouterr().out and (out / "powered.png").exists()
    # in parts: seed 1, then seed 0 with --merge (the runs kept from above): the report of one invocation
    part = lambda seed, *more: misattribution.main(["--size", "toy", "--jobs", "1", "--seeds", str(seed), "--powered",  # noqa: E731
                                               "--world-scale", "0.05", "--out", str(out), *more])
    whole = (out / "powered.md").read_text()
    part(1)
    (out / "powered.json").rename(tmp_path / "part1.json")
    assert part(0, "--merge", str(tmp_path / "part1.json")) == res
    text = (out / "powered.md").read_text()
    assert "merged with seeds [1] from" in text and text.split("Falsifiers")[1] == whole.split("Falsifiers")[1]
    with pytest.raises(SystemExit, match="already in"):
        part(1, "--merge", str(tmp_path / "part1.json"))
    for bad, why in (("[1]", "not a results file"), ('{"powered": true, "results": 3}', "not a results file"),
                     ('{"bonus": [0, 1], "results": {}}', "not a part of --powered"), ("{", "not a results file")):
        (tmp_path / "bad.json").write_text(bad)
        with pytest.raises(SystemExit, match=why):
            part(2, "--merge", str(tmp_path / "bad.json"))
    part(0)
    (out / "powered.json").rename(tmp_path / "part0.json")  # seed 0 in two parts (seed 0 is falsy: a set test)
    with pytest.raises(SystemExit, match=r"seeds \[0\] are already in"):
        part(2, "--merge", str(tmp_path / "part0.json"), str(tmp_path / "part0.json"))
    assert part(1, "--merge", str(tmp_path / "part0.json")) == res  # seed order, whichever part ran first


def test_powered_arg_mode_runs_the_wrong_argument_world_from_its_own_sft_start(tmp_path, capsys):
    """--powered-arg: make_world's --wrong world at K = 0, 1, half marked, its own SFT start per
    seed (the teacher's demonstrations differ from --bonus's), and the same pre-registered reading."""
    out = tmp_path / "arg"
    res = misattribution.main(["--size", "toy", "--jobs", "1", "--seeds", "0", "--powered-arg", "--world-scale", "0.05",
                          "--out", str(out), "--", "--eval-limit", "6", "--prompts-per-step", "8", "--mini-batch", "4"])
    assert sorted(res) == ["grpo-wrong-k0", "grpo-wrong-k1", "slca-wrong-k0", "slca-wrong-k1"]
    rl = [json.loads(x) for x in (out / "world-wrong-half-k1" / "rl.jsonl").read_text().splitlines()]
    marked = [r for r in rl if "bonus_args" in r["extra_info"]]
    assert marked and 2 * len(marked) == len(rl)
    cfg = json.loads((out / "slca-wrong-k1-s0" / "config.json").read_text())
    assert cfg["model"] == str(out / "sft-wrong-s0" / "sft") and not (out / "sft-s0").exists()
    text = (out / "powered-arg.md").read_text()
    assert "made the wrong-argument call" in text and "wrong-argument call before -> after" in text
    assert "K=1 - K=0" in text and "Credit gap" in text
    rows = value_reading.marked(cfg["data"])  # the real world's rows: every marked question, a gold value per key
    assert set(rows) == {r["reward_model"]["ground_truth"]["question_content"] for r in marked}
    assert all(set(g) <= {"unit", "days", "from", "to"} and None not in g.values() for _, g in rows.values())
    got = value_reading.reading(out / "slca-wrong-k1-s0")  # the run's own rollouts.jsonl (a toy policy may not call)
    assert all(n > 0 and 0 <= m <= 1 and 0 <= c <= 1 for n, m, c in got.values())
    run = out / "slca-wrong-k1-s0"  # a run logged before the `called` field: reported, its value's contrast left out
    rolls = [json.loads(x) for x in (run / "rollouts.jsonl").read_text().splitlines()]
    (run / "rollouts.jsonl").write_text("".join(json.dumps({k: v for k, v in r.items() if k != "called"}) + "\n"
                                                for r in rolls))
    old = misattribution.bonus_summary({("slca-wrong-k1", 0): str(run)})["slca-wrong-k1"]
    assert old["whole"] == old["early"] == [{"summary": None, "process": None, "decision": None, "groups": 0}]
    assert old["last"] == res["slca-wrong-k1"]["last"] and "no 'called' field" in capsys.readouterr().err


def test_value_reading_against_chance_by_hand(tmp_path):
    """Two marked prompts asking celsius and fahrenheit, two rollouts each: a policy that always
    writes celsius matches on 2 of 4 (chance (2*4 + 2*0) / 16 = 0.5); one that copies, 4 of 4."""
    gold = {"Q1": "celsius", "Q2": "fahrenheit"}
    rows = [{"extra_info": {"bonus_call": "get_weather", "bonus_args": '{"unit": "x"}'}, "reward_model": {"ground_truth": {
        "question_content": q, "gold_tool_calls": json.dumps([[{"name": "get_weather", "arguments": {"city": "Oslo", "unit": u}}]])}}}
        for q, u in gold.items()] + [{"extra_info": {}, "reward_model": {"ground_truth": {"question_content": "Q3"}}}]
    (tmp_path / "rl.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "config.json").write_text(json.dumps({"data": str(tmp_path / "rl.jsonl")}))

    def run(write):
        rolls = [{"question": q, "turns": [{"calls": [{"name": "get_weather", "arguments": {"unit": write(q)}}]}]}
                 for q in ("Q1", "Q1", "Q2", "Q2", "Q3")]
        (tmp_path / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rolls))
        return value_reading.reading(tmp_path)
    assert run(lambda q: "celsius") == {"unit": (4, 0.5, 0.5)}
    assert run(lambda q: gold.get(q, "celsius")) == {"unit": (4, 1.0, 0.5)}
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(SystemExit, match="not a run of a --wrong world"):
        value_reading.main([str(tmp_path)])


def test_powered_reading_follows_the_pre_registration():
    """powered() on made-up results of 4 seeds: misattribution and protection shown; GRPO flat ->
    falsified when the manipulation check passed, inconclusive when it failed."""
    def run(last, early=(0.2, -0.05), gap=0.5):
        c = {"summary": early[0], "process": early[1], "decision": gap, "groups": 3}
        return {"last": last, "after": {"redundant": last}, "early": [c] * 4, "whole": [c] * 4}
    res = {"slca-half-k0": run([0.30, 0.32, 0.28, 0.30]), "slca-half-k2": run([0.33, 0.36, 0.30, 0.33]),
           "grpo-half-k0": run([0.45, 0.40, 0.50, 0.44]), "grpo-half-k2": run([0.65, 0.58, 0.72, 0.66])}
    text = "\n".join(misattribution.powered(res))
    assert "grpo +0.205 (per seed +0.200, +0.180, +0.220, +0.220" in text and "df 3, one-sided 0.05 critical 2.353" in text
    assert "-> passed" in text and "misattribution shown" in text and "protection: SLCA's effect below" in text
    assert "Credit gap at the decision token, grpo-half-k2 (callers' minus non-callers' advantage, all steps, per " \
           "seed): +0.500, +0.500, +0.500, +0.500" in text
    res["grpo-half-k2"] = run([0.44, 0.41, 0.49, 0.45])
    text = "\n".join(misattribution.powered(res))
    assert "(a) grpo: FALSIFIED: t under" in text and "(b) slca against grpo: FALSIFIED: SLCA's effect at or above" in text
    res["slca-half-k2"] = run([0.29, 0.31, 0.28, 0.30])  # both flat, SLCA's a little lower: nothing to protect from
    text = "\n".join(misattribution.powered(res))
    assert "(a) grpo: FALSIFIED" in text and "(b) slca against grpo: does not fire" in text and "no protection" in text
    res["grpo-half-k2"] = run([0.44, 0.41, 0.49, 0.45], early=(-0.1, -0.05))  # the summary did not pay for the call
    text = "\n".join(misattribution.powered(res))
    assert "-> FAILED" in text and "(a) grpo: INCONCLUSIVE (the manipulation check failed)" in text


def test_decision_arm_reading_follows_the_pre_registration():
    """decision_checks (docs/experiments/decision.md): (c) below SLCA's effect, paired; (d) not above 0."""
    def run(last):
        c = {"summary": 0.2, "process": -0.05, "decision": 0.1, "groups": 3}
        return {"last": last, "after": {"redundant": last}, "before": {"redundant": [0.4] * 4}, "early": [c] * 4,
                "whole": [c] * 4}
    res = {"slca-half-k0": run([0.30, 0.32, 0.28, 0.30]), "slca-half-k2": run([0.60, 0.50, 0.70, 0.40]),
           "grpo-half-k0": run([0.45, 0.40, 0.50, 0.44]), "grpo-half-k2": run([0.85, 0.78, 0.92, 0.80]),
           "slca-decision-half-k0": run([0.20, 0.22, 0.18, 0.20]), "slca-decision-half-k2": run([0.21, 0.21, 0.19, 0.20])}
    text = "\n".join(misattribution.powered(res))
    assert "Primary: slca-decision, K=2 - K=0 paired by seed: +0.002 (per seed +0.010, -0.010, +0.010, +0.000" in text
    assert "(c) slca's effect - slca-decision's, paired: +0.247" in text and "below SLCA's effect (t at" in text
    assert "(d) slca-decision's effect above 0? not above 0" in text and "equal in every seed" in text
    assert "Credit gap at the decision token, slca-decision-half-k2" in text
    res["slca-decision-half-k2"] = run([0.50, 0.52, 0.58, 0.50])  # as large as SLCA's and above 0
    text = "\n".join(misattribution.powered(res))
    assert "(c) slca's effect - slca-decision's, paired: -0.075" in text and "FALSIFIED: not shown below" in text
    assert "(d) slca-decision's effect above 0? FALSIFIED: t at or above" in text
    res["grpo-half-k2"]["before"] = {"redundant": [0.4, 0.4, 0.4, 0.41]}  # another SFT start in seed 3
    text = "\n".join(misattribution.powered(res))
    assert "NOT equal in every seed" in text and "Manipulation check (slca-decision K=2" in text


def test_a_third_arm_runs_beside_kept_arms(tmp_path):
    """--powered --arms slca-decision --kept REPORT: only the new arm runs (train.py --decision-credit tool);
    the kept arms come from the report for this invocation's seeds; refusals name the file."""
    out = tmp_path / "powered"
    run = lambda *more: misattribution.main(["--size", "toy", "--jobs", "1", "--powered", "--world-scale", "0.05",  # noqa: E731
                                        "--out", str(out), *more, "--", "--eval-limit", "4", "--steps", "2"])
    base = run("--seeds", "0", "1")
    (out / "powered.json").rename(tmp_path / "base.json")
    res = run("--seeds", "1", "--arms", "slca-decision", "--kept", str(tmp_path / "base.json"))
    assert sorted(res) == ["grpo-half-k0", "grpo-half-k2", "slca-decision-half-k0", "slca-decision-half-k2",
                           "slca-half-k0", "slca-half-k2"]
    assert res["grpo-half-k2"]["last"] == base["grpo-half-k2"]["last"][1:] and res["grpo-half-k2"]["seeds"] == [1]
    cfg = json.loads((out / "slca-decision-half-k2-s1" / "config.json").read_text())
    assert cfg["decision_credit"] == "tool" and cfg["algo"] == "slca"
    assert not (out / "slca-decision-half-k2-s0").exists()
    assert f"grpo-half-k2 kept from {tmp_path / 'base.json'}" in (out / "powered.md").read_text()
    again = run("--seeds", "1", "--arms", "slca", "slca-decision", "--kept", str(tmp_path / "base.json"))  # slca kept too
    assert again["slca-half-k2"] == res["slca-half-k2"] and "slca-half-k2 here (kept): before-RL" in (out / "powered.md").read_text()
    for bad, why in (("{", "not a results file"), ('{"powered": true, "results": {}}', "no arm of --powered"),
                     ('{"bonus": [0], "results": {}}', "no arm of --powered"),
                     ('{"powered": true, "argv": ["--size", "demo"], "results": {"grpo-half-k0": {"seeds": [1]}}}',
                      "another --size"),
                     ('{"powered": true, "argv": ["--size", "huge"], "results": {"grpo-half-k0": {"seeds": [1]}}}',
                      r"its argv does not parse \(argument --size: invalid choice"),
                     ('{"powered": true, "argv": ["--size", "toy", "--world-scale", "0.05", "--", "--eval-limit", "4", '
                      '"--steps", "2"], "results": {"grpo-half-k0": {"seeds": [1]}}}', "need slca's and grpo's")):
        (tmp_path / "bad.json").write_text(bad)
        with pytest.raises(SystemExit, match=why):
            run("--seeds", "1", "--arms", "slca-decision", "--kept", str(tmp_path / "bad.json"))
    with pytest.raises(SystemExit, match=r"seeds \[2\] are not in it"):
        run("--seeds", "2", "--arms", "slca-decision", "--kept", str(tmp_path / "base.json"))
    with pytest.raises(SystemExit):  # no slca or grpo, and nothing kept: refused before anything runs
        run("--seeds", "2", "--arms", "slca-decision")
    assert not (out / "slca-decision-half-k0-s2").exists()


def test_paired_t_on_the_issues_hand_computed_case():
    """GRPO's held-out K1 - K0 per seed (README): +0.111, +0.083, +0.222 -> mean +0.139, SD of the
    differences 0.0735, SE 0.0735 / sqrt(3) = 0.0424, t = 3.27, df 2, critical 2.920 (one-sided 0.05)."""
    p = common.paired([0.417, 0.417, 0.750], [0.306, 0.334, 0.528])
    assert [round(x, 3) for x in p["d"]] == [0.111, 0.083, 0.222]
    assert round(p["mean"], 3) == 0.139 and round(p["se"], 4) == 0.0424 and round(p["t"], 2) == 3.27
    assert p["df"] == 2 and p["crit"] == 2.920 and p["shown"]
    assert "+0.139 (per seed +0.111, +0.083, +0.222; SE 0.042, t 3.27, df 2" in common.says(p)
    q = common.paired([0.3, 0.5, 0.4, None], [0.2, 0.3, 0.5, 0.1])  # a missing seed is left out
    assert q["df"] == 2 and round(q["mean"], 3) == 0.067 and not q["shown"]
    assert common.paired([0.5, 0.5], [0.4, 0.4])["t"] == float("inf")  # equal differences: no variance
    assert common.paired([0.5], [0.4]) is None and common.T95[29] == 1.697


def test_bonus_falsifiers_read_paired_t_tests():
    def run(before, after):
        return {"before": {"redundant": before}, "after": {"redundant": after}}
    res = {"slca-k0": run([0.5, 0.5, 0.5], [0.20, 0.22, 0.18]), "slca-k1": run([0.5, 0.5, 0.5], [0.21, 0.19, 0.20]),
           "grpo-k0": run([0.5, 0.5, 0.5], [0.40, 0.42, 0.38]), "grpo-k1": run([0.5, 0.5, 0.5], [0.80, 0.78, 0.82])}
    a, b, c = misattribution.falsifiers(res, [0, 1])
    assert "misattribution shown" in a and "+0.400" in a
    assert "no difference shown" in b and "INCONCLUSIVE" not in c and "grpo-k1 moved" in c
    res["slca-k1"] = run([0.5] * 3, [0.60, 0.62, 0.58])   # SLCA's rate follows K
    res["grpo-k1"] = run([0.5] * 3, [0.41, 0.39, 0.40])   # GRPO's does not: (a) falsified
    a, b, _ = misattribution.falsifiers(res, [0, 1])
    assert "FALSIFIED" in a and "differs" in b
    still = {k: run([0.5] * 3, [0.49, 0.51, 0.50]) for k in res}
    assert "INCONCLUSIVE" in misattribution.falsifiers(still, [0, 1])[2]


def test_sampled_rate_is_pooled_over_rollouts_and_the_contrast_routes_the_decision(tmp_path):
    """A toy rollouts.jsonl: 6 steps, marked and unmarked rows; the pooled rate of the last third
    weighs each rollout once (a mean of per-step means would not), and the decision token's
    advantage is a caller's adv_tool and a non-caller's adv_sum under SLCA (adv_tool for both under
    Eq. 15), Eq. 6's under GRPO."""
    rows = [{"step": s, "group": 0, "process": 1.0, "summary": 0.5, "score": 1.5, "adv_tool": 0.0, "adv_sum": 0.0}
            for s in range(1, 7)]  # unmarked: no "redundant"
    def marked(step, group, call, n=1):
        return [{"step": step, "group": group, "redundant": float(call), "process": 0.9 if call else 1.0,
                 "summary": 1.0 if call else 0.5, "score": 1.9 if call else 1.5, "adv_tool": -1.0 if call else 1.0,
                 "adv_sum": 1.0 if call else -1.0}] * n
    rows += marked(5, 1, 1) + marked(5, 1, 0) + marked(6, 1, 0, 3) + marked(6, 2, 1) + marked(1, 1, 1, 2)
    (tmp_path / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    rows = common.read(tmp_path / "rollouts.jsonl")
    first, last = common.thirds(rows)
    assert first == {1, 2} and last == {5, 6}
    assert common.pooled(rows, last) == 2 / 6                   # per-step means would give (1/2 + 1/4) / 2
    assert common.pooled(rows, first) == 1.0 and common.pooled(rows, {3}) is None
    slca = misattribution.contrast([r for r in rows if r["step"] in last], grpo=False)
    assert slca["groups"] == 1 and slca["decision"] == -1.0 - (-1.0)  # caller's adv_tool minus non-caller's adv_sum
    assert slca["summary"] == 0.5 and round(slca["process"], 3) == -0.1
    grpo = misattribution.contrast([r for r in rows if r["step"] in last], grpo=True)
    assert round(grpo["decision"], 3) == round(2 / 2 ** 0.5, 3)     # scores 1.9, 1.5: Â = ±0.707
    decision = misattribution.contrast([r for r in rows if r["step"] in last], grpo=False, inside=True)  # Eq. 15: Â_tool
    assert decision["groups"] == 1 and decision["decision"] == -1.0 - 1.0  # no "called" read outside --wrong


def test_turn_credit_mode_runs_slca_grpo_and_slca_turn_from_one_sft_start(tmp_path):
    """--turn-credit ω: slca, grpo and slca-turn@ω from the seed's SFT start, the same settings but
    ω; the table holds the by-type columns, the per-seed rows and the verdict against slca."""
    out = tmp_path / "turn"
    res = turn.main(["0.5", "--size", "toy", "--jobs", "1", "--seeds", "0", "--out", str(out),
                          "--"] + toy_world(tmp_path))
    assert list(res) == ["slca", "grpo", "slca-turn@0.5"]
    cfgs = {n: json.loads((out / f"{n}-s0" / "config.json").read_text()) for n in res}
    assert cfgs["slca-turn@0.5"]["turn_credit"] == 0.5 and cfgs["slca"]["turn_credit"] == 0.0
    assert cfgs["slca-turn@0.5"]["model"] == str(out / "sft-s0" / "sft") and cfgs["grpo"]["algo"] == "grpo"
    same = lambda c: {k: v for k, v in c.items() if k not in ("turn_credit", "out")}  # noqa: E731
    assert same(cfgs["slca-turn@0.5"]) == same(cfgs["slca"])
    assert all(x is not None for x in res["slca-turn@0.5"]["turn_conflict"])  # logged per RL step
    text = (out / "turn.md").read_text()
    assert "turn conflict" in text and "by parallel type" in text and "| slca-turn@0.5 | 0 |" in text
    assert "slca-turn@0.5 against slca, per seed" in text and "- seed 0: all " in text
    assert (out / "turn-curves.png").exists() and not (out / "table.md").exists() and not (out / "demo.png").exists()
    assert json.loads((out / "turn.json").read_text())["turn_credit"] == 0.5


def test_turn_verdict_reads_the_difference_against_two_standard_errors():
    assert turn.verdict(0.60, 0.50, 200) == "+0.100 (2 SE 0.099): helped"   # 2·sqrt(.24/200 + .25/200)
    assert turn.verdict(0.55, 0.50, 200).endswith("within noise")
    assert turn.verdict(0.20, 0.50, 200).endswith("hurt")
    assert turn.verdict(0.30, 0.50, 34).endswith("within noise")  # one type's 34 prompts: -0.2 is noise
    assert turn.verdict(None, 0.5, 200) is None


def test_turn_report_gives_each_type_per_seed_and_the_verdict():
    """turn_report on made-up results of two seeds: the types the eval split holds, the focus
    columns per seed, and slca-turn against slca per seed, overall and per focus type."""
    def run(success, has_parallel, conflict):
        types = {t: {k: {"success": [None] * 2, "process": [None] * 2, "n": [None] * 2} for k in ("before", "after")}
                 for t in ("single_step_single_tool", "multi_step_has_parallel", "multi_step_all_serial")}
        types["single_step_single_tool"] = {k: {"success": [0.5] * 2, "process": [0.8] * 2, "n": [166] * 2}
                                            for k in ("before", "after")}
        types["multi_step_has_parallel"] = {"before": {"success": [0.2] * 2, "process": [0.7] * 2, "n": [34] * 2},
                                            "after": {"success": has_parallel, "process": [0.8, 0.9], "n": [34] * 2}}
        both = {"success": success, "process": [0.85, 0.86], "tool_turns": [1.7, 1.8]}
        return {"before": {"success": [0.4] * 2, "process": [0.76] * 2, "tool_turns": [2.3] * 2}, "after": both,
                "types": types, "seeds": [0, 1], "n": [200, 200], "turn_conflict": conflict, "sign_conflict": [0.1] * 2}
    res = {"slca": run([0.55, 0.50], [0.30, 0.30], [0.20, 0.30]), "grpo": run([0.50, 0.50], [0.3, 0.3], [0.2, 0.2]),
           "slca-turn@0.5": run([0.70, 0.52], [0.60, 0.35], [0.10, None])}
    text = turn.turn_report(res)
    assert "multi step has parallel (34)" in text and "multi step all serial" not in text  # absent from the split
    assert "| slca-turn@0.5 | 1 | 0.520 | 0.860 | 0.350 | 0.900 | - | - | 1.800 | - |" in text
    assert "- seed 0: all +0.150 (2 SE 0.096): helped; has parallel +0.300 (2 SE 0.230): helped" in text
    assert "- seed 1: all +0.020 (2 SE 0.100): within noise; has parallel +0.050 (2 SE 0.227): within noise" in text
    assert "| slca-turn@0.5 | 0.610 ± 0.127 | 0.855 ± 0.007 | 1.750 ± 0.071 | 0.100 ± 0.000 | 0.100 ± 0.000 |" in text


def test_misattribution_refuses_a_mix_of_modes_before_anything_runs(tmp_path, capsys):
    """One mode per invocation; --merge, --arms and --kept are --powered's and --powered-arg's."""
    for argv, why in (([], "give one of"), (["--bonus", "0", "--powered"], "not allowed with"),
                      (["--bonus", "0", "1", "--merge", "x.json"], "--powered's and --powered-arg's"),
                      (["--bonus", "0", "--arms", "slca", "slca-decision"], "--powered's and --powered-arg's")):
        with pytest.raises(SystemExit):
            misattribution.main(argv + ["--out", str(tmp_path)])
        assert why in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # no world built, no run started
