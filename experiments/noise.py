"""Judge noise (docs/experiments/noise.md): SLCA and GRPO at each judge-noise level p
(`train.py --judge-noise p`), from the paper comparison's SFT starts (experiments/common.py).

    python -m experiments.noise 0 0.5 1.0              # seeds 0 1 2; p = 0 reuses experiments.paper's runs in --out
    python -m experiments.noise 0 0.5 --size toy       # seconds per run (tests/test_reproduce.py)

Outputs in --out (default runs/reproduce): noise.md, noise.json and noise-curves.png, as
experiments.paper's table.md, table.json and curves.png for the sweep's runs; noise.png, held-out
Process, Name F1 and Success@0.9 against the noise p.
"""
import sys

from experiments import common, paper
from experiments.common import figure, mean_std, plot_curves, save

def noise_run(algo, p):
    """Name and train.py flags of `algo` at judge noise p; p = 0 is the comparison's own run."""
    return (algo, paper.ALGOS[algo]) if p == 0 else (f"{algo}@{p}", paper.ALGOS[algo] + ["--judge-noise", str(p)])


def plot_noise(res, levels, path):
    if (made := figure(path, 3, 14)) is None:
        return
    fig, axes = made
    for ax, (key, title) in zip(axes, [("process", "Process"), ("name_f1", "Name F1"), ("success", "Success@0.9")]):
        for i, algo in enumerate(paper.PAIR):
            ms = [mean_std(res[noise_run(algo, p)[0]]["after"][key]) for p in levels]
            ax.errorbar(levels, [m for m, _ in ms], yerr=[s for _, s in ms], marker="o", capsize=3,
                        color=f"C{i}", label=algo)
        start = mean_std(next(iter(res.values()))["before"][key])[0]
        ax.axhline(start, color="gray", linestyle=":", label="SFT start")
        ax.set(title=f"held-out {title} after RL", xlabel="judge noise p")
    save(fig, axes, path)


def parser():
    p = common.parser(__doc__, [0, 1, 2])
    p.add_argument("levels", type=float, nargs="+", metavar="P", help="judge-noise levels (p = 0 reuses "
                   "experiments.paper's slca and grpo runs in the same --out)")
    return p


def plan(p, a, argv):
    return [noise_run(algo, level) for level in a.levels for algo in paper.PAIR], [], "sft", None


summary, report = paper.summary, paper.report  # the comparison's table, for the sweep's runs


def stem(a):
    return "noise"


def record(a):
    return {"noise": a.levels}


def figures(a, res, out):
    plot_curves(res, f"{out}/noise-curves.png")
    plot_noise(res, a.levels, f"{out}/noise.png")
    return "noise-curves.png, noise.png"


def main(argv=None):
    return common.main(argv, sys.modules[__name__])


if __name__ == "__main__":
    main()
