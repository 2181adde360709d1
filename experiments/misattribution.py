"""Credit misattribution on constructed worlds (docs/experiments/misattribution.md, decision.md):
SLCA and GRPO where the summary reward pays for something the tool segment does, in both directions.

    python -m experiments.misattribution --bonus 0 1           # the first diagnostic: the bonus world at K = 0, 1; seeds 0 1 2
    python -m experiments.misattribution --powered             # the pre-registered one: K = 0, 2, half-marked, 4 seeds
    python -m experiments.misattribution --powered-arg         # its other direction: a wrong argument, K = 0, 1, 4 seeds
    python -m experiments.misattribution --powered --seeds 1 2 3 --merge PART/powered.json   # in parts: seed 0 before
    python -m experiments.misattribution --powered --arms slca slca-decision --kept docs/experiments/misattribution/powered.json
                                                               # a third arm (README Eq. 15) beside kept ones
    python -m experiments.misattribution --powered --size toy --world-scale 0.05   # seconds (tests/test_reproduce.py)

The worlds are `tools/make_world.py --bonus K` (an unneeded call whose answer makes a fuller
summary) and `--wrong K` (a wrong value inside a needed call that the judge's reference pays for
at K = 1), built in --out (default runs/reproduce). Outputs there:

    bonus.md, bonus.json, bonus.png   (--bonus) the worlds in <out>/world-k<K>/ (the SFT data is one
                   for every K, so each seed has one SFT start), SLCA and GRPO on each; the marked
                   prompts' held-out redundant-call rate, S_sum, Name F1 and Success@0.9 / @1.0 before
                   and after RL, the sampled rate during training, per seed, the pre-registered
                   falsifiers (a)-(c) checked (paired t tests over seeds), and the rate's curves
    powered.md, powered.json, powered.png   (--powered) SLCA and GRPO at K = 0, 2 on
                   <out>/world-half-k<K>/ (`bonus_world`: half the RL prompts marked, 175 marked eval
                   rows), from the SFT starts of --bonus (reused in the same --out); the same table,
                   then the primary measure (the sampled rate pooled over the last third of RL steps,
                   K=2 - K=0 paired t per algorithm), the falsifiers, the manipulation check and the
                   credit gap at the decision token; with --arms slca-decision (README Eq. 15) and the
                   arms it does not run taken from a kept report (--kept), its reading too
                   (docs/experiments/decision.md); arms kept from before 444bb48 sampled with
                   torch.multinomial, arms run since by lib.sampling.sampler.draw: they pair by seed and SFT
                   start, not by random draws
    powered-arg.md, .json, .png   (--powered-arg) the same for the other direction: the --wrong
                   world at K = 0, 1 (<out>/world-wrong-half-k<K>/, 181 marked eval rows), from its own
                   SFT starts (<out>/sft-wrong-s<seed>/); the measure is the share of marked rollouts
                   that call the marked tool with the wrong argument
"""
import json
import os
import random
import statistics
import sys

from experiments import common, paper
from experiments.common import (SMOOTH, evals, figure, fmt, keep_arms, merge, num, paired, parts, per_step,
                              pooled, read, save, says, smooth, thirds)
from tools import make_world

POWERED_ARMS = {"slca": paper.ALGOS["slca"], "grpo": paper.ALGOS["grpo"],  # --powered's arms: the pre-registered two, and
                "slca-decision": paper.ALGOS["slca"] + ["--decision-credit", "tool"]}  # docs/experiments/decision.md's (README Eq. 15)
POWERED_K = {False: [0, 2], True: [0, 1]}  # K of --powered and --powered-arg (pre-registered)


# --powered / --powered-arg: the larger world's size; its eval split holds 175 / 181 marked rows
# (tools/make_world.py --bonus 2 / --wrong 1, seed 0, measured)
HALF_SCALE = {False: 6, True: 10}


def bonus_world(out, k, scale, half=False, wrong=False):
    """Writes the diagnostic world at K = k into <out>/world-k<k>/ (wrong: make_world's --wrong
    world, <out>/world-wrong-k<k>/); returns its file paths. half (--powered, --powered-arg):
    <out>/world-half-k<k>/ (world-wrong-half-k<k>/) holds only rl and eval, from a world
    HALF_SCALE times larger: all its marked RL rows and as many unmarked ones (a seeded draw, the
    same for every K), in the world's order, and its marked eval rows."""
    folder = os.path.join(out, "world" + "-wrong" * wrong + "-half" * half + f"-k{k}")
    os.makedirs(folder, exist_ok=True)
    kw = {"wrong_k": k} if wrong else {"bonus_k": k}
    if half:
        world = make_world.generate(0, HALF_SCALE[wrong] * scale, **kw)
        marked = lambda r: "bonus_call" in r["extra_info"]  # noqa: E731
        rest = [i for i, r in enumerate(world["rl"]) if not marked(r)]
        pick = set(random.Random(0).sample(rest, min(len(rest), sum(map(marked, world["rl"])))))
        world = {"rl": [r for i, r in enumerate(world["rl"]) if marked(r) or i in pick],
                 "eval": [r for r in world["eval"] if marked(r)]}
    else:
        world = make_world.generate(0, scale, **kw)
    paths = {}
    for name, rows in world.items():
        paths[name] = os.path.join(folder, f"{name}.jsonl")
        with open(paths[name], "w", encoding="utf-8") as f:
            f.writelines(make_world.compact(r) + "\n" for r in rows)
    return paths


BONUS_METRICS = [("redundant", "redundant"), ("summary", "S_sum"), ("name_f1", "NameF1"), ("success", "Success@0.9"),
                 ("success@1.0", "Success@1.0")]


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
    reading (docs/experiments/misattribution.md, wrong-value.md): the primary measure per algorithm, the falsifiers, the
    manipulation check and the credit gap."""
    hi, lo = (lambda a: res[f"{a}-{tag}-k{k}"]), (lambda a: res[f"{a}-{tag}-k0"])  # noqa: E731
    eff = {a: paired(hi(a)["last"], lo(a)["last"]) for a in paper.PAIR}
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
    """(passed, line): the manipulation check on `run`'s first third of steps (docs/experiments/misattribution.md):
    in mixed marked groups, callers' S_sum above the non-callers' and their S_process below."""
    early = [c for c in run["early"] if c["groups"]]
    s_sum, s_proc = (statistics.fmean([c[k] for c in early]) if early else None for k in ("summary", "process"))
    passed = s_sum is not None and s_sum > 0 and s_proc < 0
    return passed, (f"Manipulation check ({name}, first third of steps, {len(early)} seeds with mixed groups): callers' "
                    f"S_sum - non-callers' {s_sum if s_sum is None else f'{s_sum:+.3f}'}, S_process "
                    f"{s_proc if s_proc is None else f'{s_proc:+.3f}'} -> " + ("passed" if passed else "FAILED"))


def decision_checks(hi, lo, k, manip, res):
    """The third arm's pre-registered reading (docs/experiments/decision.md): slca-decision's
    effect on the primary measure, (c) below SLCA's (paired), (d) not above 0. When the kept grpo
    runs had other SFT starts, the manipulation check is slca-decision's own K = k runs'."""
    effect = {a: [None if None in (x, y) else x - y for x, y in zip(hi(a)["last"], lo(a)["last"])]
              for a in ("slca", "slca-decision")}
    e, below = paired(hi("slca-decision")["last"], lo("slca-decision")["last"]), paired(effect["slca"], effect["slca-decision"])
    if not (e and below):
        return ["Primary, slca-decision: (needs 2 seeds)"]
    same = all(hi(a)["before"] == hi("slca-decision")["before"] for a in ("slca", "grpo"))
    lines = ["Shared SFT starts: the before-RL held-out marked numbers of slca-decision, slca and grpo are "
             + ("equal in every seed" if same else "NOT equal in every seed (the kept grpo runs started elsewhere: the "
                                                   "lines that pair grpo with slca are not paired by start)")]
    if not same:
        manip, line = manipulation(hi("slca-decision"), f"slca-decision K={k}, docs/experiments/decision.md")
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
        lines.append(f"- {name}: " + ", ".join(f"seed {s}: {num(b)} -> {num(a)} (sampled {num(first)} -> {num(last)})"
                                               for s, b, a, first, last in per))
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
    if not set(paper.PAIR) <= {n.rsplit("-", 2)[0] for n in [*names, *arms]}:  # "slca-decision-half-k2": its arm
        raise SystemExit(f"--kept {path}: the arms run here and kept there need slca's and grpo's")
    return part


def parser():
    p = common.parser(__doc__, None)
    p.set_defaults(seeds=None)  # --bonus: 0 1 2; --powered, --powered-arg: 0 1 2 3
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--bonus", type=int, nargs="+", default=None, choices=[0, 1, 2], metavar="K",
                      help="the first diagnostic: SLCA and GRPO on the bonus world at each K, one SFT start per seed")
    mode.add_argument("--powered", action="store_true",
                      help="the pre-registered diagnostic: SLCA and GRPO at K = 0, 2 on half-marked RL prompts, 4 seeds")
    mode.add_argument("--powered-arg", action="store_true",
                      help="the other direction, pre-registered: SLCA and GRPO at K = 0, 1 on half-marked prompts of "
                           "make_world's --wrong world (a wrong argument the summary reward pays for), 4 seeds")
    p.add_argument("--merge", nargs="+", default=[], metavar="JSON",
                   help="--powered, --powered-arg: report these seeds with those of earlier parts (their "
                        "powered.json / powered-arg.json; other seeds, the same mode)")
    p.add_argument("--arms", nargs="+", choices=list(POWERED_ARMS), default=paper.PAIR,
                   help="--powered, --powered-arg: the arms run (slca-decision: --decision-credit tool, README Eq. 15)")
    p.add_argument("--kept", default=None, metavar="JSON",
                   help="--powered, --powered-arg: the arms not run here, from an earlier report of the same mode "
                        "(its powered.json or powered-arg.json), for this invocation's seeds")
    p.add_argument("--world-scale", type=float, default=1.0, help="the generated world's size (tests: small)")
    return p


def plan(p, a, argv):
    """The RL runs ([(name, train.py flags)]), the SFT start's flags and stem, and what merges kept
    arms and earlier parts into the results; refused before anything runs where the flags disagree.
    The worlds are built in --out first."""
    if a.bonus is None and not a.powered and not a.powered_arg:
        p.error("give one of --bonus K..., --powered, --powered-arg")
    a.seeds = a.seeds or ([0, 1, 2] if a.bonus is not None else [0, 1, 2, 3])
    mode = "powered" if a.powered else "powered_arg" if a.powered_arg else None
    a.arms = list(dict.fromkeys(a.arms))
    if (a.kept or a.merge or a.arms != paper.PAIR) and not mode:
        p.error("--arms, --kept and --merge are --powered's and --powered-arg's")
    if mode and not a.kept and not set(paper.PAIR) <= set(a.arms):
        p.error("--arms without slca or grpo needs --kept: an earlier report that holds them")
    got = parts(a.merge, mode, a.seeds)
    if a.bonus is not None:  # one world per K; their SFT data are one file's bytes, so one SFT start per seed
        worlds = {k: bonus_world(a.out, k, a.world_scale) for k in a.bonus}
        w0 = worlds[a.bonus[0]]
        plan_ = [(f"{algo}-k{k}", paper.ALGOS[algo] + ["--data", worlds[k]["rl"], "--eval-data", worlds[k]["eval"]])
                 for k in a.bonus for algo in paper.PAIR]
        return plan_, ["--data", w0["rl"], "--sft-data", w0["sft"]], "sft", None
    # --powered: the SFT start of `--bonus 0 ...` (its tokenizer learns world-k0's texts); --powered-arg's its own
    wrong, tag = (True, "wrong") if a.powered_arg else (False, "half")
    w0 = bonus_world(a.out, 0, a.world_scale, wrong=wrong)
    half = {k: bonus_world(a.out, k, a.world_scale, half=True, wrong=wrong) for k in POWERED_K[wrong]}
    plan_ = [(f"{algo}-{tag}-k{k}", POWERED_ARMS[algo] + ["--data", half[k]["rl"], "--eval-data", half[k]["eval"]])
             for k in POWERED_K[wrong] for algo in a.arms]
    kept = read_kept(a.kept, mode, a.seeds, [n for n, _ in plan_], argv) if a.kept else None

    def combine(res):
        note = "; " + keep_arms(res, kept, a.kept, a.seeds) if a.kept else ""
        return note + ("; merged with " + merge(res, got, a.merge) if a.merge else "")
    return plan_, ["--data", w0["rl"], "--sft-data", w0["sft"]], "sft-wrong" if wrong else "sft", combine


summary = bonus_summary


def report(a, res):
    return (bonus_table(res, a.bonus) if a.bonus is not None else bonus_table(res, None) if a.powered
            else bonus_table(res, None, "wrong"))


def stem(a):
    return "bonus" if a.bonus is not None else "powered" if a.powered else "powered-arg"


def record(a):
    return {"bonus": a.bonus, "powered": a.powered, "powered_arg": a.powered_arg}


def figures(a, res, out):
    plot_bonus(res, os.path.join(out, f"{stem(a)}.png"), "wrong-argument call" if a.powered_arg else "redundant call")
    return f"{stem(a)}.png"


def main(argv=None):
    return common.main(argv, sys.modules[__name__])


if __name__ == "__main__":
    main()
