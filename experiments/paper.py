"""The paper's comparison at CPU scale (docs/experiments/paper.md): SLCA, GRPO, ToolPO, w/o HierR
and w/o SGLS on the demo, from one SFT start per seed (experiments/common.py).

    python -m experiments.paper                        # every algorithm; seeds 0 1 2
    python -m experiments.paper --algos slca grpo --seeds 0
    python -m experiments.paper --size toy             # the same on a toy size, in seconds (tests/test_reproduce.py)
    python -m experiments.paper -- --steps 12          # flags after -- go to every train.py run

Outputs in --out (default runs/reproduce):

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
"""
import sys

from experiments import common
from experiments.common import curves, evals, fmt, mean_std, plot_curves
from lib.inputs.data import PARALLEL_TYPES

ALGOS = {  # name -> train.py flags (docs/method.md §7 ablations)
    "slca": ["--algo", "slca", "--grad-cosine"],    # --grad-cosine: the paper's diagnostic, logged per step
    "grpo": ["--algo", "grpo", "--grad-cosine"],    # w/o SLCA
    "toolpo": ["--algo", "toolpo"],                 # the release's additive baseline
    "no-hierr": ["--algo", "slca", "--hierr-weights", "0", "0", "0", "0", "0"],  # w/o HierR: all process weights 0
    "no-sgls": ["--algo", "slca", "--no-sgls"],     # w/o SGLS: no tool definition, no checks 2-4
}
PAIR = ["slca", "grpo"]  # the two every other experiment compares
METRICS = [("success", "Success@0.9"), ("success_code", "Success@0.9(code)"), ("name_f1", "NameF1"),
           ("arg_match", "ArgMatch"), ("process", "Process"), ("tool_turns", "ToolTurns")]
TYPE_METRICS = [("success", "Success@0.9"), ("process", "Process"), ("n", "n")]  # per parallel type


def summary(folders):
    """folders: {(name, seed): folder} -> {name: {"before"/"after": {metric: [per seed]}, "types":
    {parallel type: {"before"/"after": {metric: [per seed]}}}, "curve": ...}}."""
    out = {}
    for (name, seed), folder in folders.items():
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


def parser():
    p = common.parser(__doc__, [0, 1, 2])
    p.add_argument("--algos", nargs="+", choices=list(ALGOS), default=list(ALGOS))
    return p


def plan(p, a, argv):
    return [(name, ALGOS[name]) for name in a.algos], [], "sft", None


def report(a, res):
    return table(res)


def stem(a):
    return "table"


def record(a):
    return {}


def figures(a, res, out):
    plot_curves(res, f"{out}/curves.png")
    if "slca" in res:  # the demo's own curve: slca of seed s is `python train.py --seed s`
        plot_curves({"slca": res["slca"]}, f"{out}/demo.png")
    return "curves.png, demo.png"


def main(argv=None):
    return common.main(argv, sys.modules[__name__])


if __name__ == "__main__":
    main()
