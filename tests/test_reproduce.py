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
