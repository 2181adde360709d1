"""scripts/reproduce.py end to end on a toy size: SFT start per seed, every algorithm from it, the table and plots."""
import importlib.util
import json
from pathlib import Path

from scripts import reproduce

ROOT = Path(__file__).resolve().parent.parent


def toy_world(folder):
    """A few rows of the shipped world's generator (a small --scale)."""
    spec = importlib.util.spec_from_file_location("make_world", ROOT / "scripts" / "make_world.py")
    mw = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mw)
    paths = {}
    for name, rows in mw.generate(0, scale=0.01).items():
        paths[name] = folder / f"{name}.jsonl"
        paths[name].write_text("".join(json.dumps(r) + "\n" for r in rows))
    return ["--data", str(paths["rl"]), "--eval-data", str(paths["eval"]), "--sft-data", str(paths["sft"])]


def test_compare_runs_every_algorithm_from_one_sft_start_per_seed(tmp_path, capsys):
    out = tmp_path / "rep"
    res = reproduce.main(["--size", "toy", "--jobs", "1", "--seeds", "0", "1", "--out", str(out), "--"] + toy_world(tmp_path))
    assert list(res) == list(reproduce.ALGOS)
    for seed in (0, 1):
        start = out / f"sft-s{seed}" / "sft"
        assert (start / "config.json").exists()
        configs = []
        for name in reproduce.ALGOS:
            run = out / f"{name}-s{seed}"
            cfg = json.loads((run / "config.json").read_text())
            # RL only, from the seed's SFT start
            assert cfg["model"] == str(start) and cfg["sft_data"] == "" and cfg["steps"] == 2
            assert (run / "final").is_dir() and not (run / "sft").exists()
            configs.append({k: v for k, v in cfg.items() if k not in ("algo", "hierr_weights", "no_sgls", "grad_cosine", "out")})
        assert all(c == configs[0] for c in configs)  # the same steps, prompts, G, lr and budgets
        assert len({json.dumps(reproduce.evals(out / f"{n}-s{seed}")["before RL"]) for n in reproduce.ALGOS}) == 1
    assert json.loads((out / "grpo-s0" / "config.json").read_text())["algo"] == "grpo"
    assert json.loads((out / "no-hierr-s1" / "config.json").read_text())["hierr_weights"] == [0.0] * 5
    table = (out / "table.md").read_text()
    assert "| SFT start |" in table and "| toolpo |" in table and " ± " in table and "wall time" in table
    assert "kept from earlier" not in table
    assert (out / "curves.png").stat().st_size > 1000 and (out / "demo.png").stat().st_size > 1000
    assert len(res["slca"]["curves"][1]) == 2  # one point per RL step
    assert "wall time" in capsys.readouterr().out
    # a second call keeps the finished runs
    reproduce.main(["--size", "toy", "--jobs", "1", "--seeds", "0", "--algos", "slca", "--out", str(out), "--"] + toy_world(tmp_path))
    assert "kept" in capsys.readouterr().out
    assert "2 of 2 runs kept from earlier" in (out / "table.md").read_text()  # its wall time measured no run


def test_noise_mode_runs_slca_and_grpo_per_level(tmp_path):
    out = tmp_path / "noise"
    res = reproduce.main(["--size", "toy", "--seeds", "0", "--noise", "0", "0.5", "--out", str(out), "--"]
                         + toy_world(tmp_path))
    assert sorted(res) == ["grpo", "grpo@0.5", "slca", "slca@0.5"]  # p = 0 is the comparison's run
    cfg = json.loads((out / "slca@0.5-s0" / "config.json").read_text())
    assert cfg["judge_noise"] == 0.5 and cfg["grad_cosine"] is True
    assert json.loads((out / "slca-s0" / "config.json").read_text())["judge_noise"] == 0.0
    assert all(m.get("grad_cosine") is not None for m in reproduce.curves(out / "grpo@0.5-s0"))
    assert (out / "slca@0.5-s0.log").exists()  # --jobs 2 (the default): each run in its own process
    assert (out / "noise.png").exists() and "grad cosine" in (out / "noise.md").read_text()
    assert not (out / "table.md").exists()


def test_bonus_mode_runs_slca_and_grpo_per_k_from_one_sft_start(tmp_path):
    """--bonus: one world per K (the same SFT file), one SFT start per seed, SLCA and GRPO on
    each K; the table holds the marked prompts' redundant-call rate and the falsifier lines."""
    out = tmp_path / "bonus"
    res = reproduce.main(["--size", "toy", "--jobs", "1", "--seeds", "0", "--bonus", "0", "1", "--world-scale",
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
    assert "redundant before -> after" in text and "Falsifiers" in text
    assert (out / "bonus.png").stat().st_size > 1000


def test_bonus_falsifiers_read_the_gaps_against_two_standard_errors():
    def run(before, after):
        return {"before": {"redundant": before}, "after": {"redundant": after}}
    res = {"slca-k0": run([0.5, 0.5, 0.5], [0.20, 0.22, 0.18]), "slca-k1": run([0.5, 0.5, 0.5], [0.21, 0.19, 0.20]),
           "grpo-k0": run([0.5, 0.5, 0.5], [0.40, 0.42, 0.38]), "grpo-k1": run([0.5, 0.5, 0.5], [0.80, 0.78, 0.82])}
    a, b, c = reproduce.falsifiers(res, [0, 1])
    assert "misattribution shown" in a and "+0.400" in a
    assert "no leakage" in b and "some run moved" in c
    res["slca-k1"] = run([0.5] * 3, [0.60, 0.62, 0.58])   # SLCA's rate follows K: leakage
    res["grpo-k1"] = run([0.5] * 3, [0.41, 0.39, 0.40])   # GRPO's does not: (a) falsified
    a, b, _ = reproduce.falsifiers(res, [0, 1])
    assert "FALSIFIED" in a and "LEAKAGE" in b
    still = {k: run([0.5] * 3, [0.49, 0.51, 0.50]) for k in res}
    assert "INCONCLUSIVE" in reproduce.falsifiers(still, [0, 1])[2]


def test_turn_credit_mode_runs_slca_grpo_and_slca_turn_from_one_sft_start(tmp_path):
    """--turn-credit ω: slca, grpo and slca-turn@ω from the seed's SFT start, the same settings but
    ω; the table holds the by-type columns, the per-seed rows and the verdict against slca."""
    out = tmp_path / "turn"
    res = reproduce.main(["--size", "toy", "--jobs", "1", "--seeds", "0", "--turn-credit", "0.5", "--out", str(out),
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
    assert reproduce.verdict(0.60, 0.50, 200) == "+0.100 (2 SE 0.099): helped"   # 2·sqrt(.24/200 + .25/200)
    assert reproduce.verdict(0.55, 0.50, 200).endswith("within noise")
    assert reproduce.verdict(0.20, 0.50, 200).endswith("hurt")
    assert reproduce.verdict(0.30, 0.50, 34).endswith("within noise")  # one type's 34 prompts: -0.2 is noise
    assert reproduce.verdict(None, 0.5, 200) is None


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
    text = reproduce.turn_report(res)
    assert "multi step has parallel (34)" in text and "multi step all serial" not in text  # absent from the split
    assert "| slca-turn@0.5 | 1 | 0.520 | 0.860 | 0.350 | 0.900 | - | - | 1.800 | - |" in text
    assert "- seed 0: all +0.150 (2 SE 0.096): helped; has parallel +0.300 (2 SE 0.230): helped" in text
    assert "- seed 1: all +0.020 (2 SE 0.100): within noise; has parallel +0.050 (2 SE 0.227): within noise" in text
    assert "| slca-turn@0.5 | 0.610 ± 0.127 | 0.855 ± 0.007 | 1.750 ± 0.071 | 0.100 ± 0.000 | 0.100 ± 0.000 |" in text
