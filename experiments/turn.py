"""Per-turn credit (docs/experiments/turn.md; README Eq. 14, beyond the paper): SLCA, GRPO and SLCA
with `train.py --turn-credit ω`, from the paper comparison's SFT starts (experiments/common.py).

    python -m experiments.turn 0.5                     # seeds 0 1 2; slca and grpo reuse experiments.paper's runs
    python -m experiments.turn 0.5 --size toy          # seconds per run (tests/test_reproduce.py)

Outputs in --out (default runs/reproduce): turn.md, turn.json, turn-curves.png: held-out
Success@0.9, Process and tool turns overall and Success@0.9 and Process by parallel type, the
training turn_conflict (the share of nonzero per-turn advantages whose sign is opposite to the
rollout's tool advantage), per seed, and per seed whether slca-turn@ω beat slca beyond 2 binomial
standard errors of the difference.
"""
import sys

from experiments import common, paper
from experiments.common import fmt, num, plot_curves

FOCUS = [("multi_step_has_parallel", "has parallel"), ("multi_step_all_serial", "all serial")]  # --turn-credit's per-seed columns


def turn_run(omega):
    """Name and train.py flags of SLCA with per-turn credit ω (README Eq. 14)."""
    return f"slca-turn@{omega}", paper.ALGOS["slca"] + ["--turn-credit", str(omega)]


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
    cols = [m for m in paper.METRICS if m[0] in ("success", "process", "tool_turns")]
    lines = ["| run | " + " | ".join(t for _, t in cols) + " | turn conflict | sign conflict |",
             "|" + "---|" * (len(cols) + 3),
             "| SFT start | " + " | ".join(fmt(first["before"][k]) for k, _ in cols) + " | | |"]
    for name, r in res.items():
        lines.append(f"| {name} | " + " | ".join(fmt(r["after"][k]) for k, _ in cols)
                     + f" | {fmt(r['turn_conflict'])} | {fmt(r['sign_conflict'])} |")
    for k, title in paper.TYPE_METRICS[:2]:
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


def parser():
    p = common.parser(__doc__, [0, 1, 2])
    p.add_argument("omega", type=float, metavar="OMEGA", help="--turn-credit's ω (slca and grpo reuse "
                   "experiments.paper's runs in the same --out)")
    return p


def plan(p, a, argv):
    return [(algo, paper.ALGOS[algo]) for algo in paper.PAIR] + [turn_run(a.omega)], [], "sft", None


summary = paper.summary


def report(a, res):
    return turn_report(res)


def stem(a):
    return "turn"


def record(a):
    return {"turn_credit": a.omega}


def figures(a, res, out):
    plot_curves(res, f"{out}/turn-curves.png")
    return "turn-curves.png"


def main(argv=None):
    return common.main(argv, sys.modules[__name__])


if __name__ == "__main__":
    main()
