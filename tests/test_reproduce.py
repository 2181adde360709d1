"""reproduce.py end to end on a toy size: SFT start per seed, every algorithm from it, the table and plots."""
import importlib.util
import json
from pathlib import Path

import reproduce

ROOT = Path(__file__).resolve().parent.parent


def toy_world(folder):
    """A few rows of the shipped world's generator (a small --scale)."""
    spec = importlib.util.spec_from_file_location("make_world", ROOT / "data" / "make_world.py")
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
            configs.append({k: v for k, v in cfg.items() if k not in ("algo", "no_hierr", "no_sgls", "grad_cosine", "out")})
        assert all(c == configs[0] for c in configs)  # the same steps, prompts, G, lr and budgets
        assert len({json.dumps(reproduce.evals(out / f"{n}-s{seed}")["before RL"]) for n in reproduce.ALGOS}) == 1
    assert json.loads((out / "grpo-s0" / "config.json").read_text())["algo"] == "grpo"
    assert json.loads((out / "no-hierr-s1" / "config.json").read_text())["no_hierr"] is True
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
