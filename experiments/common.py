"""What every experiment here shares: train.py arms from one SFT start per seed, kept runs and
kept reports, paired tests over seeds, thirds of the RL steps, tables and figures, and the driver.

Per seed, one SFT start: `train.py --steps 0 --eval-data ''` builds the tiny model and runs the
warm start of the demo preset (configs/demo.toml), saving it in <out>/sft-s<seed>/sft. Every RL run
of that seed then starts from that folder: `train.py --model <sft folder> --sft-data ''` with
every other setting of the demo preset written out as a flag (naming a --model would
otherwise switch train.py to the paper's preset), so all algorithms get the same steps,
prompts, group size, learning rate and budgets, and train.py's own "before RL" and "after RL"
evals on the held-out split are the ones compared. The KL reference is the SFT start, as in
`python train.py`, and RL draws the same random numbers after a loaded SFT as after an
in-process one, so the slca run of seed s is the demo `python train.py --seed s`.

Runs go to <out>/<name>-s<seed>/ (--out, default runs/reproduce, shared by every experiment), --jobs
at a time (default 2, this machine's cores), each in its own process on one thread with its output
in <out>/<name>-s<seed>.log (--jobs 1: one after the other, in this process). A run whose final/
folder exists is kept, so an interrupted experiment continues where it stopped when given the same
command again (delete a run folder to redo it), and one experiment reuses another's runs in the same
--out (experiments.noise and experiments.turn reuse experiments.paper's slca and grpo). Every
experiment writes <out>/<stem>.md (the report, headed by its command) and <stem>.json (every number,
the command, the commit the runs started from), and its figures. Flags after -- go to every
train.py run; --size toy runs each in seconds (tests/test_reproduce.py).
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

# a toy size for the smoke test: seconds per run
TOY = ["--tiny-size", "32", "1", "2", "--sft-limit", "16", "--sft-epochs", "1", "--sft-batch", "8", "--steps", "2",
       "--group-size", "2", "--prompts-per-step", "2", "--mini-batch", "1", "--max-tokens", "40", "--max-turns", "2",
       "--eval-limit", "4"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repo root


def run_train(argv, out, jobs=1):
    """train.py with `argv` into `out`, unless `out` already holds a finished run: in this
    process when jobs == 1, else in a child process on one thread whose output goes to
    <out>.log (so `jobs` runs share the machine's cores without oversubscribing them).
    Returns whether it ran."""
    if os.path.isdir(os.path.join(out, "final")):
        print(f"kept {out} (finished earlier)")
        return False
    t = time.time()
    argv = argv + ["--out", out, "--overwrite", "--show", "0"]
    print(f"\n=== train.py {' '.join(argv)}", flush=True)
    if jobs == 1:
        import train
        train.main(argv)
    else:
        with open(out + ".log", "w") as log:
            rc = subprocess.call([sys.executable, os.path.join(ROOT, "train.py")] + argv, stdout=log,
                                 stderr=subprocess.STDOUT, env=dict(os.environ, OMP_NUM_THREADS="1"))
        if rc:
            raise SystemExit(f"train.py failed (exit {rc}) for {out}: see {out}.log")
    print(f"=== {out}: {time.time() - t:.0f}s", flush=True)
    return True


def preset_flags(extra):
    """The demo preset (configs/demo.toml) as explicit flags, then `extra`."""
    import train
    from lib.runs import config
    return config.preset_argv(config.read_preset("demo"), train.parser()) + extra


def read(path):
    from lib.runs.files import read_jsonl
    return read_jsonl(path)


def evals(run, part="all"):
    """{label: metrics} of a run's eval.jsonl (the later line wins): overall, or of one parallel
    type (eval.metrics' keys; {} where the split has none)."""
    return {e["label"]: e.get(part, {}) for e in read(os.path.join(run, "eval.jsonl")) if "all" in e}


def curves(run):
    """Per RL step: training-rollout Success@0.9, tool turns, sign conflict, per-turn sign
    conflict (None in a run logged before train.py had it), grad cosine."""
    metrics = {m["step"]: m for m in read(os.path.join(run, "metrics.jsonl"))
               if "step" in m and m.get("stage") != "sft"}
    by_step = {}
    for r in read(os.path.join(run, "rollouts.jsonl")):
        by_step.setdefault(r["step"], []).append(r["process"] >= 0.9)
    with open(os.path.join(run, "config.json")) as f:
        cfg = json.load(f)  # w/o HierR logs S_process with all weights 0: no curve (no_hierr: a run of an older version)
    blind = cfg.get("no_hierr") or not any(cfg.get("hierr_weights", [1]))
    return [{"step": s, "success": None if blind else sum(by_step.get(s, [])) / max(1, len(by_step.get(s, []))),
             "tool_turns": m["tool_turns"], "sign_conflict": m["sign_conflict"],
             "turn_conflict": m.get("turn_conflict"), "grad_cosine": m.get("grad_cosine")}
            for s, m in sorted(metrics.items())]


def thirds(rows):
    """(first, last) third of the RL steps that `rollouts` rows span: two sets of steps."""
    steps = sorted({r["step"] for r in rows})
    n = max(1, math.ceil(len(steps) / 3))
    return set(steps[:n]), set(steps[-n:])


def per_step(rows):
    """{step: the share of that step's marked rollouts (rows with "redundant") that made the bonus
    call (--wrong: wrote the wrong value)}, steps in order."""
    by_step = {}
    for r in rows:
        if "redundant" in r:
            by_step.setdefault(r["step"], []).append(r["redundant"])
    return {s: statistics.fmean(v) for s, v in sorted(by_step.items())}


def pooled(rows, steps):
    """The share of the marked rollouts (rows with "redundant") of `steps` that made the bonus call,
    pooled over rollouts (not a mean of per-step means); None without one."""
    xs = [r["redundant"] for r in rows if "redundant" in r and r["step"] in steps]
    return statistics.fmean(xs) if xs else None


# one-sided 0.05 critical values of Student's t, df 1..30 (NIST/SEMATECH e-Handbook of Statistical
# Methods, 1.3.6.7.2 "Critical values of the Student's t distribution", column 0.95; equal to
# scipy.stats.t.ppf(0.95, df) to 3 decimals)
T95 = [6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812, 1.796, 1.782, 1.771, 1.761, 1.753,
       1.746, 1.740, 1.734, 1.729, 1.725, 1.721, 1.717, 1.714, 1.711, 1.708, 1.706, 1.703, 1.701, 1.699, 1.697]


def paired(xs, ys):
    """The paired t test of xs - ys (one value per seed; a pair with a None is left out): {"d":
    per-seed differences, "mean", "se" (of the differences' mean), "t", "df", "crit" (one-sided
    0.05 critical value), "shown" (t >= crit: xs above ys)}; None with fewer than 2 pairs."""
    d = [x - y for x, y in zip(xs, ys) if x is not None and y is not None]
    if len(d) < 2:
        return None
    if len(d) - 1 > len(T95):
        raise ValueError(f"paired: {len(d)} seeds, the t table holds df up to {len(T95)}")
    mean, se = statistics.fmean(d), statistics.stdev(d) / len(d) ** 0.5
    se = 0.0 if se < 1e-12 else se  # equal differences: a rounding error, not a spread
    t = mean / se if se else math.copysign(math.inf, mean) if mean else 0.0
    return {"d": d, "mean": mean, "se": se, "t": t, "df": len(d) - 1, "crit": T95[len(d) - 2], "shown": t >= T95[len(d) - 2]}


def says(p):
    """'+0.139 (per seed +0.111, +0.083, +0.222; SE 0.042, t 3.31, df 2, one-sided 0.05 critical 2.920)'."""
    return (f"{p['mean']:+.3f} (per seed {', '.join(f'{x:+.3f}' for x in p['d'])}; SE {p['se']:.3f}, t {p['t']:.2f}, "
            f"df {p['df']}, one-sided 0.05 critical {p['crit']:.3f})")


def mean_std(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None, None
    return statistics.fmean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0


def num(x):
    """One number to 3 places, "-" for None."""
    return "-" if x is None else f"{x:.3f}"


def fmt(xs, digits=3):
    m, s = mean_std(xs)
    return "-" if m is None else f"{m:.{digits}f} ± {s:.{digits}f}"


def fmt_list(xs):
    return "[" + ", ".join("-" if x is None else f"{x:.3f}" for x in xs) + "]"


def commit():
    """The checkout's commit (None outside git), written beside every result."""
    r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return r.stdout.strip() or None


SMOOTH = 5  # training curves: mean over the last SMOOTH RL steps (one step is only 16 prompts)


def smooth(curve, key, step):
    """Mean of `key` over the points of `curve` in (step - SMOOTH, step]; None if any is None."""
    xs = [p[key] for p in curve if step - SMOOTH < p["step"] <= step]
    return None if not xs or None in xs else statistics.fmean(xs)


def figure(path, n, width):
    """(fig, axes) of n panels, or None without matplotlib (then `path` is skipped)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib: skipping", path)
        return None
    return plt.subplots(1, n, figsize=(width, 4))


def save(fig, axes, path):
    import matplotlib.pyplot as plt
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_curves(res, path):
    if (made := figure(path, 2, 11)) is None:
        return
    fig, axes = made
    for i, (name, r) in enumerate(res.items()):
        for ax, key in zip(axes, ("success", "tool_turns")):
            steps = sorted({p["step"] for c in r["curves"] for p in c})
            if not steps:
                continue
            ys = [[smooth(c, key, s) for c in r["curves"]] for s in steps]  # per step, one value per seed
            if None not in (y for v in ys for y in v):
                ax.plot(steps, [statistics.fmean(y) for y in ys], color=f"C{i}", label=f"{name} (n={len(r['curves'])})")
                ax.fill_between(steps, [min(y) for y in ys], [max(y) for y in ys], color=f"C{i}", alpha=0.15)
            ends = [mean_std(r[k][key])[0] for k in ("before", "after")]
            if None not in ends:  # the held-out evals, greedy, before and after RL
                ax.plot([steps[0], steps[-1] + 1], ends, "o--", color=f"C{i}", label=f"{name} held-out eval")
    axes[0].set(title=f"Training rollouts: Success@0.9 (S_process >= 0.9), {SMOOTH}-step mean", xlabel="RL step",
                ylim=(-0.02, 1.02))
    axes[1].set(title=f"Training rollouts: tool-calling turns, {SMOOTH}-step mean", xlabel="RL step")
    save(fig, axes, path)


def parts(files, mode, seeds):
    """The <stem>.json of earlier parts of this mode (a mode run in parts, e.g. seed 0 first and seeds
    1-3 later: seeds pair only within themselves, so parts combine), refused before anything runs if
    another mode's or if they hold one of `seeds`."""
    got, seen = [], set(seeds)
    for path in files:
        try:
            part = json.load(open(path))
            have = {s for r in part["results"].values() for s in r["seeds"]} if part.get(mode) else None
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
            raise SystemExit(f"--merge {path}: not a results file ({type(e).__name__}: {e})")
        if have is None:
            raise SystemExit(f"--merge {path}: not a part of --{mode.replace('_', '-')}")
        if have & seen:
            raise SystemExit(f"--merge {path}: seeds {sorted(have & seen)} are already in")
        seen |= have
        got.append((have, part))
    return got


def keep_arms(res, part, path, seeds):
    """res with the kept report's arms that this invocation did not run, their values for `seeds` (the
    arms pair by seed); returns a note, which for an arm in both compares the two per seed."""
    taken, same = [], []
    for name, r in part["results"].items():
        at = [r["seeds"].index(s) for s in seeds]
        mine = {key: {m: [xs[i] for i in at] for m, xs in v.items()} if isinstance(v, dict) else [v[i] for i in at]
                for key, v in r.items()}
        if name not in res:
            res[name] = mine
            taken.append(name)
        else:
            same.append(f"{name} here (kept): before-RL marked rate {fmt_list(res[name]['before']['redundant'])} "
                        f"({fmt_list(mine['before']['redundant'])}), sampled last third {fmt_list(res[name]['last'])} "
                        f"({fmt_list(mine['last'])})")
    return (f"arms {', '.join(taken)} kept from {path} (commit {part.get('commit')})"
            + "".join(f"; {x}" for x in same))


def merge(res, got, files):
    """res with each part's seeds added (every per-seed list extended, then put in seed order);
    returns a note per part."""
    notes = []
    for path, (seeds, part) in zip(files, got):
        if set(part["results"]) != set(res):
            raise SystemExit(f"--merge {path}: runs {sorted(part['results'])}, not this mode's")
        for name, r in part["results"].items():
            for key, v in r.items():
                if isinstance(v, dict):
                    for m, xs in v.items():
                        res[name][key].setdefault(m, []).extend(xs)
                else:
                    res[name][key].extend(v)
        notes.append(f"seeds {sorted(seeds)} from {path} (wall time {part['wall_s']:.0f}s, commit {part.get('commit')})")
    for r in res.values():  # in seed order, whichever part ran first
        order = sorted(range(len(r["seeds"])), key=r["seeds"].__getitem__)
        for key, v in r.items():
            if isinstance(v, dict):
                r[key] = {m: [xs[i] for i in order] for m, xs in v.items()}
            else:
                r[key] = [v[i] for i in order]
    return "; ".join(notes)


def parser(doc, seeds):
    """The flags every experiment shares, under its docstring's first line; `seeds` the default seeds."""
    p = argparse.ArgumentParser(description=doc.split("\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=seeds)
    p.add_argument("--size", choices=["demo", "toy"], default="demo",
                   help="toy: a few seconds per run (the smoke test)")
    p.add_argument("--out", default="runs/reproduce")
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                   help="runs at a time, each in its own process on one thread (1: one after the other, in-process)")
    return p


def main(argv, q):
    """Runs experiment module `q` with `argv` (flags after -- go to every train.py run) and writes its
    report; returns its results. `q` gives parser(); plan(p, a, argv) -> ([(name, train.py flags)],
    the SFT start's flags, its folder's stem, combine(res) -> a note or None: checked and built
    before anything runs); summary(runs) -> results; report(a, res) -> markdown; stem(a); record(a)
    (its own keys of <stem>.json); figures(a, res, out) -> their names."""
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    p = q.parser()
    a = p.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    os.makedirs(a.out, exist_ok=True)
    extra = (TOY if a.size == "toy" else []) + extra
    t0, started = time.time(), commit()  # the checkout the runs start from
    plan, start_flags, start, combine = q.plan(p, a, argv)
    runs, starts = {}, {}
    for seed in a.seeds:
        starts[seed] = os.path.join(a.out, f"{start}-s{seed}")
        for name, flags in plan:
            runs[(name, seed)] = os.path.join(a.out, f"{name}-s{seed}")
    with ThreadPoolExecutor(a.jobs) as pool:  # the SFT starts first, then every RL run from them
        ran = list(pool.map(lambda s: run_train(["--seed", str(s)] + extra + start_flags + ["--steps", "0", "--eval-data", ""],
                                                starts[s], a.jobs), a.seeds))
        ran += pool.map(lambda job: run_train(["--model", os.path.join(starts[job[1]], "sft"), "--seed", str(job[1])]
                                              + preset_flags(extra) + dict(plan)[job[0]] + ["--sft-data", ""],
                                              runs[job], a.jobs), runs)
    res = q.summary(runs)
    wall = time.time() - t0
    note = f", {len(ran) - sum(ran)} of {len(ran)} runs kept from earlier" if not all(ran) else ""
    note += (combine(res) or "") if combine else ""
    stem, text = q.stem(a), q.report(a, res)
    header = (f"# python -m {q.__spec__.name} {' '.join(argv)}\n\nseeds {a.seeds}, wall time {wall:.0f}s ({a.jobs} runs "
              f"at a time, {1 if a.jobs > 1 else os.environ.get('OMP_NUM_THREADS', 'default')} thread(s) each{note}); "
              "held-out eval split, greedy.\n\n")
    with open(os.path.join(a.out, f"{stem}.md"), "w") as f:
        f.write(header + text)
    with open(os.path.join(a.out, f"{stem}.json"), "w") as f:
        json.dump({"argv": argv, "seeds": a.seeds, **q.record(a), "wall_s": wall, "commit": started, "results": res},
                  f, indent=1)
    pngs = q.figures(a, res, a.out)
    print("\n" + header + text)
    print(f"wall time {wall:.0f}s{note}; outputs in {a.out}/ ({stem}.md, {stem}.json, {pngs})")
    return res
