"""The paper's comparison at CPU scale, and the judge-noise sweep, on the embedded demo.

    python scripts/reproduce.py                        # SLCA, GRPO, ToolPO, w/o HierR, w/o SGLS; seeds 0 1 2
    python scripts/reproduce.py --noise 0 0.5 1.0      # SLCA and GRPO at each judge-noise level; seeds 0 1 2
    python scripts/reproduce.py --bonus 0 1            # the diagnostic: SLCA and GRPO on the bonus world at K = 0, 1
    python scripts/reproduce.py --powered              # the pre-registered diagnostic: K = 0, 2, half-marked, 4 seeds
    python scripts/reproduce.py --powered-arg          # its other direction: a wrong argument, K = 0, 1, 4 seeds
    python scripts/reproduce.py --powered --seeds 1 2 3 --merge PART/powered.json   # a mode in parts: seed 0 before
    python scripts/reproduce.py --powered --arms slca slca-decision --kept docs/diagnostic/powered.json   # a third arm
    python scripts/reproduce.py --turn-credit 0.5      # SLCA, GRPO and SLCA with per-turn credit ω = 0.5; seeds 0 1 2
    python scripts/reproduce.py --size toy             # the same on a toy size, in seconds (tests/test_reproduce.py)
    python scripts/reproduce.py -- --steps 12          # flags after -- go to every train.py run

Per seed, one SFT start: `train.py --steps 0 --eval-data ''` builds the tiny model and runs the
warm start of the demo preset (configs/demo.toml), saving it in <out>/sft-s<seed>/sft. Every RL run
of that seed then starts from that folder: `train.py --model <sft folder> --sft-data ''` with
every other setting of the demo preset written out as a flag (naming a --model would
otherwise switch train.py to the paper's preset), so all algorithms get the same steps,
prompts, group size, learning rate and budgets, and train.py's own "before RL" and "after RL"
evals on the held-out split are the ones compared. The KL reference is the SFT start, as in
`python train.py`, and RL draws the same random numbers after a loaded SFT as after an
in-process one, so the slca run of seed s is the demo `python train.py --seed s`.

Runs go to <out>/<name>-s<seed>/, --jobs at a time (default 2, this machine's cores), each
in its own process on one thread with its output in <out>/<name>-s<seed>.log (--jobs 1: one
after the other, in this process). A run whose final/ folder exists is kept, so an
interrupted scripts/reproduce.py continues where it stopped (delete a run folder to redo it), and
the sweep (and --turn-credit) reuses the comparison's slca and grpo runs. Outputs in <out>:

    table.md       mean ± std over seeds of the held-out metrics (Success@0.9 as the paper
                   defines it, S_process >= 0.9, and as the released code logs it, Name F1,
                   ArgMatch, Process, tool turns) per algorithm, the SFT start first, then the
                   per-seed numbers, the training sign-conflict rate and gradient cosine
    curves.png     training-rollout Success@0.9 and tool turns against RL step per algorithm (a
                   5-step mean): mean over seeds, min-max shaded (w/o HierR has no Success
                   curve: it scores with all process weights 0); markers: the held-out eval
                   before and after RL
    demo.png       the slca curve alone: `python train.py` for each seed
    table.json     every number above
    noise.md, noise.json, noise-curves.png   (--noise) the same for the sweep's runs
    noise.png      (--noise) held-out Process, Name F1 and Success@0.9 against the noise p
    bonus.md, bonus.json, bonus.png   (--bonus) the diagnostic (docs/results.md "Credit misattribution,
                   constructed"): the worlds `scripts/make_world.py --bonus K` in <out>/world-k<K>/
                   (the SFT data is one for every K, so each seed has one SFT start), SLCA and
                   GRPO on each; the marked prompts' held-out redundant-call rate, S_sum, Name F1
                   and Success@0.9 / @1.0 before and after RL, the sampled rate during training,
                   per seed, the pre-registered falsifiers (a)-(c) checked (paired t tests over seeds),
                   and the rate's curves
    powered.md, powered.json, powered.png   (--powered) the pre-registered diagnostic: SLCA and GRPO
                   at K = 0, 2 on <out>/world-half-k<K>/ (`bonus_world`: half the RL prompts marked,
                   175 marked eval rows), from the SFT starts of --bonus (reused in the same --out);
                   the same table, then the primary measure (the sampled rate pooled over the last
                   third of RL steps, K=2 - K=0 paired t per algorithm), the falsifiers, the
                   manipulation check and the credit gap at the decision token; with --arms
                   slca-decision (README Eq. 15) and the arms it does not run taken from a kept report
                   (--kept), its reading too (docs/diagnostic.md §3); arms kept from before 444bb48
                   sampled with torch.multinomial, arms run since by lib.sampler.draw: they pair by
                   seed and SFT start, not by random draws
    powered-arg.md, .json, .png   (--powered-arg) the same for the other direction: make_world's
                   --wrong world at K = 0, 1 (<out>/world-wrong-half-k<K>/, 181 marked eval rows),
                   from its own SFT starts (<out>/sft-wrong-s<seed>/); the measure is the share of
                   marked rollouts that call the marked tool with the wrong argument
    turn.md, turn.json, turn-curves.png   (--turn-credit ω) per-turn credit (README Eq. 14): slca,
                   grpo and slca-turn@ω; held-out Success@0.9, Process and tool turns overall and
                   Success@0.9 and Process by parallel type, the training turn_conflict (the share
                   of nonzero per-turn advantages whose sign is opposite to the rollout's tool
                   advantage), per seed, and per seed whether slca-turn@ω beat slca beyond 2
                   binomial standard errors of the difference
"""
import argparse
import json
import math
import os
import statistics
import sys
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

ALGOS = {  # name -> train.py flags (docs/method.md §7 ablations)
    "slca": ["--algo", "slca", "--grad-cosine"],    # --grad-cosine: the paper's diagnostic, logged per step
    "grpo": ["--algo", "grpo", "--grad-cosine"],    # w/o SLCA
    "toolpo": ["--algo", "toolpo"],                 # the release's additive baseline
    "no-hierr": ["--algo", "slca", "--hierr-weights", "0", "0", "0", "0", "0"],  # w/o HierR: all process weights 0
    "no-sgls": ["--algo", "slca", "--no-sgls"],     # w/o SGLS: no tool definition, no checks 2-4
}
NOISE_ALGOS = ["slca", "grpo"]
POWERED_ARMS = {"slca": ALGOS["slca"], "grpo": ALGOS["grpo"],  # --powered's arms: the pre-registered two, and
                "slca-decision": ALGOS["slca"] + ["--decision-credit", "tool"]}  # docs/diagnostic.md §3's (README Eq. 15)
POWERED_K = {False: [0, 2], True: [0, 1]}  # K of --powered and --powered-arg (docs/diagnostic.md, pre-registered)
TURN_ALGOS = ["slca", "grpo"]  # --turn-credit: the baselines beside slca-turn@ω


def turn_run(omega):
    """Name and train.py flags of SLCA with per-turn credit ω (README Eq. 14)."""
    return f"slca-turn@{omega}", ALGOS["slca"] + ["--turn-credit", str(omega)]


def noise_run(algo, p):
    """Name and train.py flags of `algo` at judge noise p; p = 0 is the comparison's own run."""
    return (algo, ALGOS[algo]) if p == 0 else (f"{algo}@{p}", ALGOS[algo] + ["--judge-noise", str(p)])


# a toy size for the smoke test: seconds per run
TOY = ["--tiny-size", "32", "1", "2", "--sft-limit", "16", "--sft-epochs", "1", "--sft-batch", "8", "--steps", "2",
       "--group-size", "2", "--prompts-per-step", "2", "--mini-batch", "1", "--max-tokens", "40", "--max-turns", "2",
       "--eval-limit", "4"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repo root
sys.path.insert(0, ROOT)
METRICS = [("success", "Success@0.9"), ("success_code", "Success@0.9(code)"), ("name_f1", "NameF1"),
           ("arg_match", "ArgMatch"), ("process", "Process"), ("tool_turns", "ToolTurns")]
TYPE_METRICS = [("success", "Success@0.9"), ("process", "Process"), ("n", "n")]  # per parallel type
FOCUS = [("multi_step_has_parallel", "has parallel"), ("multi_step_all_serial", "all serial")]  # --turn-credit's per-seed columns


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
    from lib import config
    return config.preset_argv(config.read_preset("demo"), train.parser()) + extra


def read(path):
    from lib.files import read_jsonl
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


# --powered / --powered-arg: the larger world's size; its eval split holds 175 / 181 marked rows
# (scripts/make_world.py --bonus 2 / --wrong 1, seed 0, measured)
HALF_SCALE = {False: 6, True: 10}


def bonus_world(out, k, scale, half=False, wrong=False):
    """Writes the diagnostic world at K = k into <out>/world-k<k>/ (wrong: make_world's --wrong
    world, <out>/world-wrong-k<k>/); returns its file paths. half (--powered, --powered-arg):
    <out>/world-half-k<k>/ (world-wrong-half-k<k>/) holds only rl and eval, from a world
    HALF_SCALE times larger: all its marked RL rows and as many unmarked ones (a seeded draw, the
    same for every K), in the world's order, and its marked eval rows."""
    import importlib.util
    import random
    spec = importlib.util.spec_from_file_location("make_world", os.path.join(ROOT, "scripts", "make_world.py"))
    mw = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mw)
    folder = os.path.join(out, "world" + "-wrong" * wrong + "-half" * half + f"-k{k}")
    os.makedirs(folder, exist_ok=True)
    kw = {"wrong_k": k} if wrong else {"bonus_k": k}
    if half:
        world = mw.generate(0, HALF_SCALE[wrong] * scale, **kw)
        marked = lambda r: "bonus_call" in r["extra_info"]  # noqa: E731
        rest = [i for i, r in enumerate(world["rl"]) if not marked(r)]
        pick = set(random.Random(0).sample(rest, min(len(rest), sum(map(marked, world["rl"])))))
        world = {"rl": [r for i, r in enumerate(world["rl"]) if marked(r) or i in pick],
                 "eval": [r for r in world["eval"] if marked(r)]}
    else:
        world = mw.generate(0, scale, **kw)
    paths = {}
    for name, rows in world.items():
        paths[name] = os.path.join(folder, f"{name}.jsonl")
        with open(paths[name], "w", encoding="utf-8") as f:
            f.writelines(mw.compact(r) + "\n" for r in rows)
    return paths


BONUS_METRICS = [("redundant", "redundant"), ("summary", "S_sum"), ("name_f1", "NameF1"), ("success", "Success@0.9"),
                 ("success@1.0", "Success@1.0")]


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


def contrast(rows, grpo, inside=False, wrong=False):
    """Over the marked groups that hold both callers (of the marked call) and non-callers: the mean
    over groups of the callers' mean minus the non-callers' mean of S_sum, S_process and the
    advantage at the decision token. --bonus: the first token after the turn that decides call vs
    summarise; a caller's opens its call, in the tool segment, Â_tool under SLCA; a non-caller's
    opens the summary, Â_sum. `inside` (Eq. 15): a non-caller's decision token gets Â_tool too.
    `wrong` (--wrong): the value's tokens, inside the call, Â_tool, of the callers with the wrong
    value against the other callers of the marked tool (`called`; a rollout that does not call it
    has no value's tokens). Under GRPO every token gets Eq. 6's Â, recomputed here from the logged
    scores (over the whole group). None where no group has both."""
    import torch
    from advantage import grpo_advantages
    groups = {}
    for r in rows:
        if "redundant" in r:
            groups.setdefault((r["step"], r["group"]), []).append(r)
    diffs = {"summary": [], "process": [], "decision": []}
    for g in groups.values():
        adv = (grpo_advantages(torch.tensor([r["score"] for r in g], dtype=torch.float64),
                               torch.zeros(len(g), dtype=torch.long)).tolist() if grpo else
               [r["adv_tool"] if r["redundant"] > 0 or inside or wrong else r["adv_sum"] for r in g])  # (G,)
        if wrong:  # the marked tool's callers only: the others have no value's tokens
            keep = [i for i, r in enumerate(g) if r["called"] > 0]
            g, adv = [g[i] for i in keep], [adv[i] for i in keep]
        callers = [r["redundant"] > 0 for r in g]
        if all(callers) or not any(callers):
            continue
        cols = {"summary": [r["summary"] for r in g], "process": [r["process"] for r in g], "decision": adv}
        for k, xs in cols.items():
            diffs[k].append(statistics.fmean([x for x, c in zip(xs, callers) if c])
                            - statistics.fmean([x for x, c in zip(xs, callers) if not c]))
    return {k: statistics.fmean(v) if v else None for k, v in diffs.items()} | {"groups": len(diffs["summary"])}


def bonus_summary(runs):
    """{name: {"before"/"after": {metric: [per seed]} on the marked eval prompts, "all": overall
    Success@0.9 after RL, "train": per-seed [(step, sampled redundant rate)], "first"/"last": per
    seed the sampled rate pooled over the first / last third of RL steps, "early"/"whole": per seed
    the callers' contrast (`contrast`) over the first third of steps / all of them}}."""
    out = {}
    for (name, seed), folder in runs.items():
        marked = {e["label"]: e.get("bonus", {}) for e in read(os.path.join(folder, "eval.jsonl")) if "all" in e}
        row = out.setdefault(name, {"before": {}, "after": {}, "all": [], "seeds": [], "train": [], "first": [],
                                    "last": [], "early": [], "whole": []})
        row["seeds"].append(seed)
        for label, key in (("before RL", "before"), ("after RL", "after")):
            for k, _ in BONUS_METRICS:
                row[key].setdefault(k, []).append(marked.get(label, {}).get(k))
        row["all"].append(evals(folder).get("after RL", {}).get("success"))
        rows = read(os.path.join(folder, "rollouts.jsonl"))
        row["train"].append([[s, v] for s, v in per_step(rows).items()])  # lists: as JSON reads back
        first, last = thirds(rows) if rows else (set(), set())
        row["first"].append(pooled(rows, first))
        row["last"].append(pooled(rows, last))
        grpo, inside, wrong = name.startswith("grpo"), name.startswith("slca-decision"), "-wrong-" in name
        unread = wrong and any("redundant" in r and "called" not in r for r in rows)  # logged before the field
        if unread:
            print(f"{folder}/rollouts.jsonl: no 'called' field, so no value's-token contrast (left out)", file=sys.stderr)
        kept = [] if unread else rows
        row["early"].append(contrast([r for r in kept if r["step"] in first], grpo, inside, wrong))
        row["whole"].append(contrast(kept, grpo, inside, wrong))
    return out


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


def falsifiers(res, ks):
    """The README's falsifiers (a)-(c) of --bonus, read with paired t tests over seeds (the runs of
    a seed share their SFT start, prompt order and eval prompts) on the held-out redundant-call rate."""
    if 0 not in ks or len(ks) < 2:
        return ["(falsifiers need K = 0 and another K)"]
    k = max(ks)
    lines = []
    g = paired(res[f"grpo-k{k}"]["after"]["redundant"], res["grpo-k0"]["after"]["redundant"])
    if g:
        lines.append(f"(a) grpo K={k} - K=0: {says(g)} -> "
                     + ("misattribution shown (t above the critical value)" if g["shown"] else "FALSIFIED: t under the critical value"))
    g = paired(res[f"slca-k{k}"]["after"]["redundant"], res["slca-k0"]["after"]["redundant"])
    if g:
        lines.append(f"(b) slca K={k} - K=0: {says(g)} -> "
                     + ("differs (|t| above the critical value: the no-call choice's summary credit, README Method, "
                        "or leakage)" if abs(g["t"]) >= g["crit"] else "no difference shown"))
    moved = []  # (c) per run, two-sided at 0.10: |t| above the one-sided 0.05 value (no direction is predicted)
    for name, r in res.items():
        g = paired(r["after"]["redundant"], r["before"]["redundant"])
        moved.append(f"{name} {'moved' if g and abs(g['t']) >= g['crit'] else 'did not move'}"
                     + (f" ({g['mean']:+.3f}, t {g['t']:.2f})" if g else ""))
    lines.append("(c) after - before RL per run, two-sided at 0.10: " + "; ".join(moved)
                 + (" -> INCONCLUSIVE: no run moved" if all("did not" in m for m in moved) else ""))
    return lines


def powered(res, tag="half", k=2):
    """--powered's (tag "half", K = 0, k) or --powered-arg's ("wrong", K = 0, 1) pre-registered
    reading (docs/diagnostic.md): the primary measure per algorithm, the falsifiers, the
    manipulation check and the credit gap."""
    hi, lo = (lambda a: res[f"{a}-{tag}-k{k}"]), (lambda a: res[f"{a}-{tag}-k0"])  # noqa: E731
    eff = {a: paired(hi(a)["last"], lo(a)["last"]) for a in NOISE_ALGOS}
    what = "the wrong-argument call" if tag == "wrong" else "the bonus call"
    lines = [f"Primary: marked training rollouts that made {what}, pooled over the last third of RL steps, "
             f"K={k} - K=0 paired by seed: {a} {says(e) if e else '(needs 2 seeds)'}" for a, e in eff.items()]
    manip, line = manipulation(hi("grpo"), f"grpo K={k}")
    lines.append(line)
    g, sl = eff["grpo"], eff["slca"]
    if g and sl:
        fail = "INCONCLUSIVE (the manipulation check failed)" if not manip else "FALSIFIED"
        lines.append("(a) grpo: " + ("misattribution shown (t at or above the critical value)" if g["shown"]
                                     else f"{fail}: t under the critical value"))
        lines.append("(b) slca against grpo: " + (f"{fail}: SLCA's effect at or above GRPO's" if sl["mean"] >= g["mean"]
                                                  else "protection: SLCA's effect below GRPO's" if g["shown"]
                                                  else "does not fire (SLCA's effect below GRPO's), but no protection is "
                                                       "shown: there is no misattribution to protect from (a)"))
        dd = paired(*([x - y for x, y in zip(hi(a)["last"], lo(a)["last"])] for a in ("grpo", "slca")))
        if dd:
            lines.append(f"Secondary: grpo's effect - slca's, paired: {says(dd)}")
    if f"slca-decision-{tag}-k{k}" in res:
        lines += decision_checks(hi, lo, k, manip, res)
    for a in [x for x in POWERED_ARMS if f"{x}-{tag}-k{k}" in res]:
        e = paired(hi(a)["after"]["redundant"], lo(a)["after"]["redundant"])
        if e:
            lines.append(f"Secondary: held-out marked eval, greedy, after RL, K={k} - K=0, {a}: {says(e)}")
    for name, r in res.items():  # reported without thresholds
        gaps = [c["decision"] for c in r["whole"]]
        lines.append(f"Credit gap at the decision token, {name} (callers' minus non-callers' advantage, all steps, "
                     f"per seed): " + ", ".join("-" if x is None else f"{x:+.3f}" for x in gaps))
    return lines


def manipulation(run, name):
    """(passed, line): the manipulation check on `run`'s first third of steps (docs/diagnostic.md §1):
    in mixed marked groups, callers' S_sum above the non-callers' and their S_process below."""
    early = [c for c in run["early"] if c["groups"]]
    s_sum, s_proc = (statistics.fmean([c[k] for c in early]) if early else None for k in ("summary", "process"))
    passed = s_sum is not None and s_sum > 0 and s_proc < 0
    return passed, (f"Manipulation check ({name}, first third of steps, {len(early)} seeds with mixed groups): callers' "
                    f"S_sum - non-callers' {s_sum if s_sum is None else f'{s_sum:+.3f}'}, S_process "
                    f"{s_proc if s_proc is None else f'{s_proc:+.3f}'} -> " + ("passed" if passed else "FAILED"))


def decision_checks(hi, lo, k, manip, res):
    """The third arm's pre-registered reading (docs/diagnostic.md §3, issue 38): slca-decision's
    effect on the primary measure, (c) below SLCA's (paired), (d) not above 0. When the kept grpo
    runs had other SFT starts, the manipulation check is slca-decision's own K = k runs'."""
    effect = {a: [None if None in (x, y) else x - y for x, y in zip(hi(a)["last"], lo(a)["last"])]
              for a in ("slca", "slca-decision")}
    e, below = paired(hi("slca-decision")["last"], lo("slca-decision")["last"]), paired(effect["slca"], effect["slca-decision"])
    if not (e and below):
        return ["Primary, slca-decision: (needs 2 seeds)"]
    same = all(hi(a)["before"] == hi("slca-decision")["before"] for a in ("slca", "grpo"))
    lines = [f"Shared SFT starts: the before-RL held-out marked numbers of slca-decision, slca and grpo are "
             + ("equal in every seed" if same else "NOT equal in every seed (the kept grpo runs started elsewhere: the "
                                                   "lines that pair grpo with slca are not paired by start)")]
    if not same:
        manip, line = manipulation(hi("slca-decision"), f"slca-decision K={k}, docs/diagnostic.md §3")
        lines.append(line)
    fail = "FALSIFIED" if manip else "INCONCLUSIVE (the manipulation check failed)"
    return lines + [f"Primary: slca-decision, K={k} - K=0 paired by seed: {says(e)}",
            f"(c) slca's effect - slca-decision's, paired: {says(below)} -> "
            + ("below SLCA's effect (t at or above the critical value)" if below["shown"]
               else f"{fail}: not shown below SLCA's effect"),
            "(d) slca-decision's effect above 0? " + (f"{fail}: t at or above the critical value" if e["shown"]
                                                     else "not above 0 (t under the critical value)")]


def bonus_table(res, ks, tag="half"):
    """The marked prompts' table, per seed, and the checks: --bonus's falsifiers (ks), or those of
    --powered (ks None, tag "half") or --powered-arg (tag "wrong")."""
    call = "wrong-argument call" if tag == "wrong" else "redundant call"  # the marked call: "redundant" in the logs
    head = ("| run | " + " | ".join(f"{call} before -> after" if k == "redundant" else t for k, t in BONUS_METRICS)
            + f" | Success@0.9 (all) | sampled {call} (pooled), first -> last third of steps |")
    lines = ["Marked eval prompts (the bonus kinds), greedy; mean ± std over seeds.", "", head,
             "|" + "---|" * (len(BONUS_METRICS) + 3)]
    for name, r in res.items():
        cells = [f"{fmt(r['before']['redundant'])} -> {fmt(r['after']['redundant'])}"]
        cells += [fmt(r["after"][k]) for k, _ in BONUS_METRICS[1:]]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {fmt(r['all'])} | {fmt(r['first'])} -> {fmt(r['last'])} |")
    lines += ["", f"Per seed, held-out {call} rate before -> after RL; sampled rate pooled, first -> last third:", ""]
    for name, r in res.items():
        per = zip(r["seeds"], r["before"]["redundant"], r["after"]["redundant"], r["first"], r["last"])
        lines.append(f"- {name}: " + ", ".join(f"seed {s}: {num(b)} -> {num(a)} (sampled {num(f)} -> {num(l)})"
                                               for s, b, a, f, l in per))
    checks = falsifiers(res, ks) if ks is not None else powered(res, tag, 2 if tag == "half" else 1)
    return "\n".join(lines + ["", "Falsifiers (README):", ""] + ["- " + x for x in checks]) + "\n"


def plot_bonus(res, path, call="redundant call"):
    if (made := figure(path, 1, 7)) is None:
        return
    fig, axes = made
    ax = axes if not hasattr(axes, "__len__") else axes[0]
    for i, (name, r) in enumerate(res.items()):
        steps = sorted({s for t in r["train"] for s, _ in t})
        if not steps:
            continue
        curves_ = [[{"step": s, "r": v} for s, v in t] for t in r["train"]]
        ys = [[smooth(c, "r", s) for c in curves_] for s in steps]
        ys = [[y for y in v if y is not None] for v in ys]
        keep = [(s, v) for s, v in zip(steps, ys) if v]
        ax.plot([s for s, _ in keep], [statistics.fmean(v) for _, v in keep], color=f"C{i}", label=name,
                linestyle="-" if name.startswith("grpo") else "--")
        ax.fill_between([s for s, _ in keep], [min(v) for _, v in keep], [max(v) for _, v in keep], color=f"C{i}",
                        alpha=0.12)
    ax.set(title=f"Training rollouts on marked prompts: {call} rate, {SMOOTH}-step mean", xlabel="RL step",
           ylim=(-0.02, 1.02))
    save(fig, [ax], path)


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


def collect(runs):
    """runs: {(name, seed): folder} -> {name: {"before"/"after": {metric: [per seed]}, "types":
    {parallel type: {"before"/"after": {metric: [per seed]}}}, "curve": ...}}."""
    from lib.data import PARALLEL_TYPES
    out = {}
    for (name, seed), folder in runs.items():
        e, c = evals(folder), curves(folder)
        row = out.setdefault(name, {"before": {}, "after": {}, "types": {}, "seeds": [], "n": [], "sign_conflict": [],
                                    "turn_conflict": [], "grad_cosine": [], "curves": []})
        row["seeds"].append(seed)
        row["n"].append(e.get("after RL", {}).get("n"))  # held-out prompts
        for label, key in (("before RL", "before"), ("after RL", "after")):
            for k, _ in METRICS:
                row[key].setdefault(k, []).append(e.get(label, {}).get(k))
        for t in PARALLEL_TYPES:
            et = evals(folder, t)
            for label, key in (("before RL", "before"), ("after RL", "after")):
                cell = row["types"].setdefault(t, {}).setdefault(key, {})
                for k, _ in TYPE_METRICS:
                    cell.setdefault(k, []).append(et.get(label, {}).get(k))
        row["sign_conflict"].append(mean_std([x["sign_conflict"] for x in c])[0])
        row["turn_conflict"].append(mean_std([x["turn_conflict"] for x in c])[0])
        row["grad_cosine"].append(mean_std([x["grad_cosine"] for x in c])[0])
        row["curves"].append(c)
    return out


def table(res):
    """The mean ± std table (markdown) with the per-seed numbers below it."""
    head = "| run | " + " | ".join(t for _, t in METRICS) + " | sign conflict | grad cosine |"
    lines = [head, "|" + "---|" * (len(METRICS) + 3)]
    first = next(iter(res.values()))
    lines.append("| SFT start | " + " | ".join(fmt(first["before"][k]) for k, _ in METRICS) + " | | |")
    for name, r in res.items():
        lines.append(f"| {name} | " + " | ".join(fmt(r["after"][k]) for k, _ in METRICS)
                     + f" | {fmt(r['sign_conflict'])} | {fmt(r['grad_cosine'])} |")
    lines += ["", "Per seed, Success@0.9 (S_process >= 0.9) before -> after RL:", ""]
    for name, r in res.items():
        pairs = zip(r["seeds"], r["before"]["success"], r["after"]["success"])
        lines.append(f"- {name}: " + ", ".join(f"seed {s}: {b:.3f} -> {a:.3f}" for s, b, a in pairs
                                               if a is not None and b is not None))
    return "\n".join(lines) + "\n"


def se_diff(p1, p2, n):
    """Standard error of p1 - p2, two independent proportions over n prompts each."""
    return (p1 * (1 - p1) / n + p2 * (1 - p2) / n) ** 0.5


def verdict(a, b, n):
    """'+0.015 (2 SE 0.097): within noise' for proportions a - b over n prompts; None if missing."""
    if a is None or b is None or not n:
        return None
    d, two = a - b, 2 * se_diff(a, b, n)
    return f"{d:+.3f} (2 SE {two:.3f}): " + ("within noise" if abs(d) <= two else "helped" if d > 0 else "hurt")


def turn_report(res):
    """--turn-credit's tables (markdown): overall, by parallel type, per seed, and per seed
    whether slca-turn@ω differed from slca beyond 2 standard errors."""
    first = next(iter(res.values()))
    types = [t for t, v in first["types"].items() if any(v["after"]["n"])]  # those the eval split holds
    ns = {t: first["types"][t]["after"]["n"][0] for t in types}
    cols = [m for m in METRICS if m[0] in ("success", "process", "tool_turns")]
    lines = ["| run | " + " | ".join(t for _, t in cols) + " | turn conflict | sign conflict |",
             "|" + "---|" * (len(cols) + 3),
             "| SFT start | " + " | ".join(fmt(first["before"][k]) for k, _ in cols) + " | | |"]
    for name, r in res.items():
        lines.append(f"| {name} | " + " | ".join(fmt(r["after"][k]) for k, _ in cols)
                     + f" | {fmt(r['turn_conflict'])} | {fmt(r['sign_conflict'])} |")
    for k, title in TYPE_METRICS[:2]:
        lines += ["", f"Held-out {title} by parallel type (n prompts), mean ± std over seeds:", "",
                  "| run | " + " | ".join(f"{t.replace('_', ' ')} ({ns[t]})" for t in types) + " |",
                  "|" + "---|" * (len(types) + 1),
                  "| SFT start | " + " | ".join(fmt(first["types"][t]["before"][k]) for t in types) + " |"]
        for name, r in res.items():
            lines.append(f"| {name} | " + " | ".join(fmt(r["types"][t]["after"][k]) for t in types) + " |")
    head = (["run", "seed", "Success@0.9", "Process"] + [f"{label} {m}" for _, label in FOCUS
                                                         for m in ("Success@0.9", "Process")]
            + ["ToolTurns", "turn conflict"])
    lines += ["", "Per seed, after RL:", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, r in res.items():
        for i, seed in enumerate(r["seeds"]):
            by_type = [r["types"][t]["after"][k][i] for t, _ in FOCUS for k in ("success", "process")]
            xs = [r["after"]["success"][i], r["after"]["process"][i], *by_type, r["after"]["tool_turns"][i],
                  r["turn_conflict"][i]]
            lines.append(f"| {name} | {seed} | " + " | ".join(map(num, xs)) + " |")
    base = res.get("slca")
    for name in [n for n in res if n.startswith("slca-turn")] if base else []:
        lines += ["", f"{name} against slca, per seed: the difference in held-out Success@0.9 and twice its "
                      "standard error (two independent proportions over n prompts; 'helped' or 'hurt' only beyond "
                      "2 SE):", ""]
        r = res[name]
        for i, seed in enumerate(r["seeds"]):
            if seed in base["seeds"]:
                j = base["seeds"].index(seed)
                parts = [f"all {verdict(r['after']['success'][i], base['after']['success'][j], r['n'][i])}"]
                parts += [f"{label} " + verdict(r["types"][t]["after"]["success"][i],
                                                base["types"][t]["after"]["success"][j], ns[t])
                          for t, label in FOCUS if t in types]
                lines.append(f"- seed {seed}: " + "; ".join(parts))
    return "\n".join(lines) + "\n"


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


def plot_noise(res, levels, path):
    if (made := figure(path, 3, 14)) is None:
        return
    fig, axes = made
    for ax, (key, title) in zip(axes, [("process", "Process"), ("name_f1", "Name F1"), ("success", "Success@0.9")]):
        for i, algo in enumerate(NOISE_ALGOS):
            ms = [mean_std(res[noise_run(algo, p)[0]]["after"][key]) for p in levels]
            ax.errorbar(levels, [m for m, _ in ms], yerr=[s for _, s in ms], marker="o", capsize=3,
                        color=f"C{i}", label=algo)
        start = mean_std(next(iter(res.values()))["before"][key])[0]
        ax.axhline(start, color="gray", linestyle=":", label="SFT start")
        ax.set(title=f"held-out {title} after RL", xlabel="judge noise p")
    save(fig, axes, path)


def experiment(a, out):
    """The RL runs of the experiment the flags ask for: [(name, train.py flags)], and the flags of
    every seed's SFT start (--bonus: the worlds are built in <out>/world-k<K>/ first)."""
    if a.bonus is not None:  # one world per K; their SFT data are one file's bytes, so one SFT start per seed
        worlds = {k: bonus_world(out, k, a.world_scale) for k in a.bonus}
        w0 = worlds[a.bonus[0]]
        return ([(f"{algo}-k{k}", ALGOS[algo] + ["--data", worlds[k]["rl"], "--eval-data", worlds[k]["eval"]])
                 for k in a.bonus for algo in NOISE_ALGOS], ["--data", w0["rl"], "--sft-data", w0["sft"]])
    if a.powered or a.powered_arg:  # --powered: the SFT start of `--bonus 0 ...` (its tokenizer learns world-k0's texts)
        wrong, tag = (True, "wrong") if a.powered_arg else (False, "half")
        w0 = bonus_world(out, 0, a.world_scale, wrong=wrong)
        half = {k: bonus_world(out, k, a.world_scale, half=True, wrong=wrong) for k in POWERED_K[wrong]}
        return ([(f"{algo}-{tag}-k{k}", POWERED_ARMS[algo] + ["--data", half[k]["rl"], "--eval-data", half[k]["eval"]])
                 for k in POWERED_K[wrong] for algo in a.arms], ["--data", w0["rl"], "--sft-data", w0["sft"]])
    if a.noise:
        return [noise_run(algo, p) for p in a.noise for algo in NOISE_ALGOS], []
    if a.turn_credit is not None:
        return [(algo, ALGOS[algo]) for algo in TURN_ALGOS] + [turn_run(a.turn_credit)], []
    return [(name, ALGOS[name]) for name in a.algos], []


def parts(files, mode, seeds):
    """The <stem>.json of earlier parts of this mode (a mode run in parts, e.g. seed 0 in one
    session and seeds 1-3 in the next: seeds pair only within themselves, so parts combine),
    refused before anything runs if another mode's or if they hold one of `seeds` (mode None: no mode here)."""
    if files and not mode:
        raise SystemExit("--merge: parts of --powered or --powered-arg only")
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


def read_kept(path, mode, seeds, names, argv):
    """The report `--kept` names, refused in one line before anything runs unless it is this mode's
    (same --size, --world-scale and train.py flags after --) and holds `seeds` for every arm of it not
    in `names` (this invocation's runs), and those arms with `names` include slca's and grpo's."""
    try:
        part = json.load(open(path))
        arms = {name: r for name, r in part["results"].items() if name not in names} if part.get(mode) else None
        have = [{s for s in r["seeds"]} for r in (arms or {}).values()]
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
        raise SystemExit(f"--kept {path}: not a results file ({type(e).__name__}: {e})")
    if not arms:
        raise SystemExit(f"--kept {path}: no arm of --{mode.replace('_', '-')} that this invocation does not run")
    if not isinstance(before := part.get("argv"), list) or not all(isinstance(x, str) for x in before):
        raise SystemExit(f"--kept {path}: not a results file (no argv)")
    if missing := sorted(set(seeds) - set.intersection(*have)):
        raise SystemExit(f"--kept {path}: seeds {missing} are not in it")

    def settings(v):
        p = parser()
        p.error = lambda message: sys.exit(f"--kept {path}: its argv does not parse ({message}): {' '.join(v)}")
        return vars(p.parse_args(v[:v.index("--")] if "--" in v else v)), v[v.index("--") + 1:] if "--" in v else []
    (mine, extra), (theirs, their_extra) = settings(argv), settings(before)
    if (mine["size"], mine["world_scale"], extra) != (theirs["size"], theirs["world_scale"], their_extra):
        raise SystemExit(f"--kept {path}: another --size, --world-scale or train.py flags ({' '.join(before)})")
    if not set(NOISE_ALGOS) <= {n.rsplit("-", 2)[0] for n in [*names, *arms]}:  # "slca-decision-half-k2": its arm
        raise SystemExit(f"--kept {path}: the arms run here and kept there need slca's and grpo's")
    return part


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


def fmt_list(xs):
    return "[" + ", ".join("-" if x is None else f"{x:.3f}" for x in xs) + "]"


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


def commit():
    """The checkout's commit (None outside git), written beside every result."""
    r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return r.stdout.strip() or None


def write_outputs(a, argv, out, res, wall, kept, started):
    """<out>/<stem>.md and .json, and the figures; returns (stem, the header, the report text, the figures' names)."""
    text = (bonus_table(res, a.bonus) if a.bonus is not None else bonus_table(res, None) if a.powered
            else bonus_table(res, None, "wrong") if a.powered_arg else turn_report(res) if a.turn_credit is not None
            else table(res))
    header = (f"# scripts/reproduce.py {' '.join(argv)}\n\nseeds {a.seeds}, wall time {wall:.0f}s ({a.jobs} runs at a time, "
              f"{1 if a.jobs > 1 else os.environ.get('OMP_NUM_THREADS', 'default')} thread(s) each{kept}); "
              "held-out eval split, greedy.\n\n")
    stem = ("bonus" if a.bonus is not None else "powered" if a.powered else "powered-arg" if a.powered_arg else "noise" if a.noise else "turn" if a.turn_credit is not None
            else "table")  # beside the comparison's
    with open(os.path.join(out, f"{stem}.md"), "w") as f:
        f.write(header + text)
    with open(os.path.join(out, f"{stem}.json"), "w") as f:
        json.dump({"argv": argv, "seeds": a.seeds, "noise": a.noise, "bonus": a.bonus, "powered": a.powered, "powered_arg": a.powered_arg, "turn_credit": a.turn_credit,
                   "wall_s": wall, "commit": started, "results": res},
                  f, indent=1)
    if a.bonus is not None or a.powered or a.powered_arg:
        plot_bonus(res, os.path.join(out, f"{stem}.png"), "wrong-argument call" if a.powered_arg else "redundant call")
        pngs = f"{stem}.png"
    else:
        plot_curves(res, os.path.join(out, "curves.png" if stem == "table" else f"{stem}-curves.png"))
        pngs = {"noise": "noise-curves.png, noise.png", "turn": "turn-curves.png"}.get(stem, "curves.png, demo.png")
    if "slca" in res and stem == "table":  # the demo's own curve: slca of seed s is `python train.py --seed s`
        plot_curves({"slca": res["slca"]}, os.path.join(out, "demo.png"))
    if a.noise:
        plot_noise(res, a.noise, os.path.join(out, "noise.png"))
    return stem, header, text, pngs


def parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=None, help="default 0 1 2 (--powered, --powered-arg: 0 1 2 3)")
    p.add_argument("--algos", nargs="+", choices=list(ALGOS), default=list(ALGOS))
    p.add_argument("--noise", type=float, nargs="+", default=None,
                   help="judge-noise levels: run SLCA and GRPO at each instead of --algos (p = 0 reuses "
                        "the comparison's runs in the same --out)")
    p.add_argument("--bonus", type=int, nargs="+", default=None, choices=[0, 1, 2], metavar="K",
                   help="the diagnostic: SLCA and GRPO on the bonus world at each K, from one SFT start per seed")
    p.add_argument("--powered", action="store_true",
                   help="the pre-registered diagnostic: SLCA and GRPO at K = 0, 2 on half-marked RL prompts, 4 seeds")
    p.add_argument("--powered-arg", action="store_true",
                   help="the other direction, pre-registered: SLCA and GRPO at K = 0, 1 on half-marked prompts of "
                        "make_world's --wrong world (a wrong argument the summary reward pays for), 4 seeds")
    p.add_argument("--turn-credit", type=float, default=None, metavar="OMEGA",
                   help="per-turn credit: SLCA, GRPO and SLCA with --turn-credit OMEGA instead of --algos (slca "
                        "and grpo reuse the comparison's runs in the same --out)")
    p.add_argument("--merge", nargs="+", default=[], metavar="JSON",
                   help="--powered, --powered-arg: report these seeds with those of earlier parts (their "
                        "powered.json / powered-arg.json; other seeds, the same mode)")
    p.add_argument("--arms", nargs="+", choices=list(POWERED_ARMS), default=NOISE_ALGOS,
                   help="--powered, --powered-arg: the arms run (slca-decision: --decision-credit tool, README Eq. 15)")
    p.add_argument("--kept", default=None, metavar="JSON",
                   help="--powered, --powered-arg: the arms not run here, from an earlier report of the same mode "
                        "(its powered.json or powered-arg.json), for this invocation's seeds")
    p.add_argument("--world-scale", type=float, default=1.0, help="--bonus, --powered: the generated world's size (tests: small)")
    p.add_argument("--size", choices=["demo", "toy"], default="demo",
                   help="toy: a few seconds per run (the smoke test)")
    p.add_argument("--out", default="runs/reproduce")
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                   help="runs at a time, each in its own process on one thread (1: one after the other, in-process)")
    return p


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    p = parser()
    a = p.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if sum(x not in (None, False) for x in (a.noise, a.bonus, a.turn_credit, a.powered, a.powered_arg)) > 1:
        p.error("--noise, --bonus, --powered, --powered-arg and --turn-credit are separate experiments: give one")
    a.seeds = a.seeds or ([0, 1, 2, 3] if a.powered or a.powered_arg else [0, 1, 2])
    mode = "powered" if a.powered else "powered_arg" if a.powered_arg else None
    a.arms = list(dict.fromkeys(a.arms))
    if (a.kept or a.arms != NOISE_ALGOS) and not mode:
        p.error("--arms and --kept are --powered's and --powered-arg's")
    if mode and not a.kept and not set(NOISE_ALGOS) <= set(a.arms):
        p.error("--arms without slca or grpo needs --kept: an earlier report that holds them")
    got = parts(a.merge, mode, a.seeds)
    out = a.out
    os.makedirs(out, exist_ok=True)
    extra = (TOY if a.size == "toy" else []) + extra
    t0, started = time.time(), commit()  # the checkout the runs start from

    plan, start_flags = experiment(a, out)
    kept_part = read_kept(a.kept, mode, a.seeds, [n for n, _ in plan], argv) if a.kept else None
    runs, starts = {}, {}
    for seed in a.seeds:
        starts[seed] = os.path.join(out, f"sft{'-wrong' * a.powered_arg}-s{seed}")  # --wrong's SFT data differ
        for name, flags in plan:
            runs[(name, seed)] = os.path.join(out, f"{name}-s{seed}")
    with ThreadPoolExecutor(a.jobs) as pool:  # the SFT starts first, then every RL run from them
        ran = list(pool.map(lambda s: run_train(["--seed", str(s)] + extra + start_flags + ["--steps", "0", "--eval-data", ""],
                                                starts[s], a.jobs), a.seeds))
        ran += pool.map(lambda job: run_train(["--model", os.path.join(starts[job[1]], "sft"), "--seed", str(job[1])]
                                              + preset_flags(extra) + dict(plan)[job[0]] + ["--sft-data", ""],
                                              runs[job], a.jobs), runs)

    res = bonus_summary(runs) if a.bonus is not None or a.powered or a.powered_arg else collect(runs)
    wall = time.time() - t0
    kept = f", {len(ran) - sum(ran)} of {len(ran)} runs kept from earlier" if not all(ran) else ""
    kept += "; " + keep_arms(res, kept_part, a.kept, a.seeds) if a.kept else ""
    kept += "; merged with " + merge(res, got, a.merge) if a.merge else ""
    stem, header, text, pngs = write_outputs(a, argv, out, res, wall, kept, started)
    print("\n" + header + text)
    print(f"wall time {wall:.0f}s{kept}; outputs in {out}/ ({stem}.md, {stem}.json, {pngs})")
    return res


if __name__ == "__main__":
    main()
