"""Training plots from run folders, with matplotlib (optional extra, requirements-bench.txt).

Reads what train.py writes in a run folder: metrics.jsonl (one line per RL step; SFT lines,
marked "stage": "sft", are skipped) and eval.jsonl (one line per eval: label, step, and the
metric tables of eval.py, "all" holding the overall numbers). Draws one line per run, the
run's folder name as its label, so SLCA and GRPO runs share every figure:

    curves.png      success and mean tool turns against RL step: the shape of the paper's
                    Figure 2. Success is eval.jsonl's all.success (Success@0.9, markers)
                    where evals were logged, and the training rollouts' mean S_process
                    (line) as a per-step proxy; tool turns likewise (line: training
                    rollouts, markers: evals).
    rewards.png     the HierR parts per step: format, name, key, value, parallel, process,
                    summary, score (training rollouts).
    advantages.png  per-segment advantage statistics: mean and std of Â_tool (solid) and
                    Â_sum (dashed), the share of groups whose segment advantages are all 0,
                    and the share of rollouts whose two advantages differ in sign.

`smooth` = N draws a trailing moving average over N steps (1: raw). The Agg backend is
used, so no display is needed.

    python eval.py plot runs/slca-s0 runs/grpo-s0 --out out/plots --smooth 5
"""
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from lib.runs.files import read_jsonl  # noqa: E402

PARTS = ["format", "name", "key", "value", "parallel", "process", "summary", "score"]  # Eqs. 2-4


def load_run(folder):
    """(label, RL metric rows, eval rows) of one run folder."""
    metrics = [r for r in read_jsonl(os.path.join(folder, "metrics.jsonl")) if "step" in r and r.get("stage") != "sft"]
    evals = [r for r in read_jsonl(os.path.join(folder, "eval.jsonl")) if "all" in r]
    return os.path.basename(os.path.normpath(folder)), metrics, evals


def smoothed(xs, n):
    """Trailing moving average over n points (the first points average what there is)."""
    return [sum(xs[max(0, i - n + 1):i + 1]) / len(xs[max(0, i - n + 1):i + 1]) for i in range(len(xs))]


def line(ax, rows, key, smooth, **kw):
    """One run's `key` against step; nothing (and no legend entry) for a run without rows."""
    if rows:
        ax.plot([r["step"] for r in rows], smoothed([r[key] for r in rows], smooth), **kw)


def plot_runs(folders, out, smooth=1):
    """Draw the three figures for the runs in `folders`; returns the PNG paths."""
    runs = [load_run(f) for f in folders]
    colors = [f"C{i % 10}" for i in range(len(runs))]
    os.makedirs(out, exist_ok=True)
    paths = []

    fig, (succ, turns) = plt.subplots(1, 2, figsize=(11, 4))
    for (label, metrics, evals), c in zip(runs, colors):
        line(succ, metrics, "process", smooth, color=c, label=f"{label} train process")
        line(turns, metrics, "tool_turns", smooth, color=c, label=f"{label} train")
        for ax, key in ((succ, "success"), (turns, "tool_turns")) if evals else ():
            ax.plot([e["step"] for e in evals], [e["all"][key] for e in evals], "o--", color=c,
                    label=f"{label} eval" + (" Success@0.9" if key == "success" else ""))
    succ.set(title="Success", xlabel="RL step", ylabel="Success@0.9 / mean S_process", ylim=(-0.02, 1.02))
    turns.set(title="Mean tool turns", xlabel="RL step", ylabel="tool-calling turns per trajectory")
    paths.append(_save(fig, (succ, turns), out, "curves.png"))

    fig, axes = plt.subplots(2, 4, figsize=(16, 7), sharex=True)
    for ax, key in zip(axes.flat, PARTS):
        for (label, metrics, _), c in zip(runs, colors):
            line(ax, metrics, key, smooth, color=c, label=label)
        ax.set_title(key)
    for ax in axes[-1]:
        ax.set_xlabel("RL step")
    paths.append(_save(fig, axes.flat[:1], out, "rewards.png"))

    fig, axes = plt.subplots(2, 2, figsize=(11, 7), sharex=True)
    panels = [("mean advantage", "adv_{}_mean"), ("advantage std", "adv_{}_std"),
              ("groups with all-zero advantage", "adv_{}_zero_groups")]
    for ax, (title, key) in zip(axes.flat, panels):
        for (label, metrics, _), c in zip(runs, colors):
            line(ax, metrics, key.format("tool"), smooth, color=c, label=f"{label} tool")
            line(ax, metrics, key.format("sum"), smooth, color=c, linestyle="--", label=f"{label} summary")
        ax.set_title(title)
    for (label, metrics, _), c in zip(runs, colors):
        line(axes[1, 1], metrics, "sign_conflict", smooth, color=c, label=label)
    axes[1, 1].set_title("tool and summary advantages of opposite sign")
    for ax in axes[-1]:
        ax.set_xlabel("RL step")
    paths.append(_save(fig, (axes[0, 0], axes[1, 1]), out, "advantages.png"))
    return paths


def _save(fig, legends, out, name):
    """Grid on every panel, a legend on the `legends` panels; write the PNG, return its path."""
    for ax in fig.axes:
        ax.grid(alpha=0.3)
    for ax in legends:
        ax.legend(fontsize=7)
    fig.tight_layout()
    path = os.path.join(out, name)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
