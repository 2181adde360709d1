"""What each score pays for calling again instead of stopping, read from train.py runs' logged
rollouts (docs/experiments/smol.md, "Why it calls once more").

    python -m experiments.stopping runs/smol-slca-s0 [more run folders]   # prints the tables, writes none

Per prompt type (docs/method.md §8) and per tool turns against the gold's steps (k - need: -1 one
step short, 0 the gold's count, +1 one call more), from every rollout in <run>/rollouts.jsonl:
the rollouts' share and their mean S_process (HierR, R_tool's score), S_sum (the judge's, R_sum's)
and score. Then the choice itself, inside the group of G rollouts of one prompt at one step (the
only comparison the advantages make, README Eq. 7-8): for every pair of rollouts in a group where one
stopped at the gold's count of tool turns and the other called again (need + 1 or more), the one
that called again minus the one that stopped, of S_process, S_sum and the two advantages A_tool and
A_sum, averaged over pairs with its standard error over groups (a group's pairs are averaged first).
A positive A_tool difference is the tool segment, which holds the extra call's first token, paid for
calling again; a negative A_sum difference is the summary segment, which holds the stop decision
(the summary turn's first token), charged for stopping. Which prompt a rollout came from is its
question, looked up in the run's RL data file (config.json's `data`). Last, per prompt type, the
share of rollouts that wrote two or more calls in one turn (one block, what Eq. 2's parallel part
pays on a parallel step) over the first and the last third of the RL steps, and the mean S_process
and Success@0.9 (S_process >= 0.9) of rollouts with such a block against those without.

    python -m experiments.stopping --stop-token RUN [RUN ...]   # issue 60's measure, per run and per arm

--stop-token: the advantage each run's training put on the stop token, the summary turn's first token
(segment.decision_mask), as its arm routes it: GRPO's Â (README Eq. 6, recomputed from the logged
scores of the group), SLCA's Â_sum (Eq. 8), and under Eq. 15 (`--decision-credit tool`) Â_tool for a
rollout that called a tool (Â_sum for one that did not: it has no decision token). Inside each group,
over every pair of rollouts that wrote a summary where one stopped at the gold's count of tool turns
and the other called again: stopped minus called again, the group's pairs averaged, then mean ± SE
over groups (t = mean / SE), per run and pooled over the runs of one arm.
"""
import argparse
import json
import os
import statistics

import torch

from eval import SUCCESS
from advantage import grpo_advantages
from experiments.common import mean_std, num, read, thirds
from lib.inputs.data import load_tasks
from rollout import Rollout

KEYS = ("process", "summary", "score")          # the logged per-rollout scores (lib/runs/loop.py log_step)
CHOICE = ("process", "summary", "adv_tool", "adv_sum")


def tool_turns(row):
    """Assistant turns that opened a tool call: rollout.Rollout.tool_turns of the logged turns."""
    return Rollout(None, row["group"], [], turns=row["turns"]).tool_turns


def prompts(run):
    """{question: (parallel type, gold steps)} of the run's RL data file."""
    with open(os.path.join(run, "config.json")) as f:
        data = json.load(f)["data"]
    return {t.question: (t.parallel_type, len(t.gold)) for t in load_tasks(data)}


def rows_of(runs):
    """Every logged rollout of `runs`, with its prompt type, gold steps `need` and tool turns `k`."""
    out = []
    for run in runs:
        kinds = prompts(run)
        for i, r in enumerate(read(os.path.join(run, "rollouts.jsonl")), 1):
            if r["question"] not in kinds:
                raise SystemExit(f"error: {run}/rollouts.jsonl row {i}: its question is not in the run's RL data "
                                 f"(config.json's `data`)")
            kind, need = kinds[r["question"]]
            out.append({**r, "run": run, "kind": kind, "need": need, "k": tool_turns(r)})
    return out


def mean_se(xs):
    """(mean, standard error) of xs; SE None below 2 values."""
    mean, sd = mean_std(xs)
    return mean, (sd / len(xs) ** 0.5 if len(xs) > 1 else None)


def levels(rows):
    """Per prompt type and k - need (capped at -2 and +2): count, share and mean scores."""
    out = {}
    for kind in sorted({r["kind"] for r in rows}):
        rs = [r for r in rows if r["kind"] == kind]
        for off in range(-2, 3):
            xs = [r for r in rs if max(-2, min(2, r["k"] - r["need"])) == off]
            if xs:
                out[(kind, off)] = {"n": len(xs), "share": len(xs) / len(rs),
                                    **{k: statistics.fmean(x[k] for x in xs) for k in KEYS}}
    return out


def choice(rows):
    """Per prompt type: the group-paired difference (called again - stopped at the gold's count) of
    CHOICE, as (mean, SE over groups, groups)."""
    groups = {}
    for r in rows:
        groups.setdefault((r["run"], r["step"], r["group"]), []).append(r)
    per = {}
    for rs in groups.values():
        stop = [r for r in rs if r["k"] == r["need"]]
        more = [r for r in rs if r["k"] > r["need"]]
        if stop and more:
            d = {k: statistics.fmean(m[k] - s[k] for m in more for s in stop) for k in CHOICE}
            per.setdefault(rs[0]["kind"], []).append(d)
    return {kind: {k: (*mean_se([d[k] for d in ds]), len(ds)) for k in CHOICE} for kind, ds in sorted(per.items())}


def block(row):
    """Whether a logged rollout wrote two or more calls in one turn."""
    return any(len(t["calls"]) > 1 for t in row["turns"])


def blocks(rows):
    """Per prompt type: the share of rollouts with a block (`block`) over the first and last third of
    the RL steps (None where the type was not drawn), and (n, mean S_process, Success@0.9) of the rollouts with a block and without."""
    first, last = thirds(rows)
    out = {}
    for kind in sorted({r["kind"] for r in rows}):
        rs = [r for r in rows if r["kind"] == kind]
        share = lambda steps: mean_std([block(r) for r in rs if r["step"] in steps])[0]  # noqa: E731
        part = lambda xs: (len(xs), statistics.fmean(x["process"] for x in xs),  # noqa: E731
                           statistics.fmean(x["process"] >= SUCCESS for x in xs)) if xs else (0, None, None)
        out[kind] = {"first": share(first), "last": share(last), "block": part([r for r in rs if block(r)]),
                     "split": part([r for r in rs if not block(r)])}
    return out


def arm(run):
    """A run's arm from its config.json: "grpo", "slca", "slca-decision" (Eq. 15) or another --algo."""
    with open(os.path.join(run, "config.json")) as f:
        c = json.load(f)
    return "slca-decision" if c["algo"] == "slca" and c.get("decision_credit") == "tool" else c["algo"]


def stop_credit(rs, algo):
    """The advantage `algo` put on each rollout's stop token, for one group's logged rollouts `rs` (module
    docstring, --stop-token); None where a rollout wrote no summary (it has no stop token)."""
    if algo == "grpo":
        adv = grpo_advantages(torch.tensor([r["score"] for r in rs], dtype=torch.float32), torch.zeros(len(rs), dtype=torch.long),
                              present=torch.tensor([r["score"] == r["score"] for r in rs])).tolist()  # Eq. 6; NaN absent
    else:
        adv = [r["adv_tool"] if algo == "slca-decision" and r["k"] else r["adv_sum"] for r in rs]
    return [a if len(r["turns"]) > r["k"] else None for a, r in zip(adv, rs)]


def stop_gap(rows):
    """Per arm: the stop token's advantage, stopped at the gold's count minus called again, paired inside
    groups; {arm: {run or "pooled": (mean, SE over groups, groups)}}."""
    groups = {}
    for r in rows:
        groups.setdefault((r["run"], r["step"], r["group"]), []).append(r)
    arms, per = {run: arm(run) for run, _, _ in groups}, {}
    for (run, _, _), rs in groups.items():
        algo = arms[run]
        credit = stop_credit(rs, algo)
        stop = [a for a, r in zip(credit, rs) if a is not None and r["k"] == r["need"]]
        more = [a for a, r in zip(credit, rs) if a is not None and r["k"] > r["need"]]
        if stop and more:
            gap = statistics.fmean(s - m for s in stop for m in more)
            per.setdefault(algo, {}).setdefault(run, []).append(gap)
    return {algo: {run: (*mean_se(gaps), len(gaps)) for run, gaps in {**by, "pooled": sum(by.values(), [])}.items()}
            for algo, by in per.items()}


def signed(x):
    """One number to 3 places with its sign, "-" for None."""
    return "-" if x is None else f"{x:+.3f}"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("runs", nargs="+", help="train.py output folders (each with rollouts.jsonl and config.json)")
    p.add_argument("--stop-token", action="store_true", help="the stop token's advantage per arm (issue 60), alone")
    a = p.parse_args(argv)
    rows = rows_of(a.runs)
    if a.stop_token:
        print("the stop token's advantage, stopped at the gold's count minus called again, paired inside groups\n")
        print("| arm | run | groups | mean ± SE | t |\n|---|---|---|---|---|")
        for algo, by in stop_gap(rows).items():
            for run, (mean, se, n) in by.items():
                t = f"{mean / se:+.2f}" if se else "-"
                print(f"| {algo} | {run} | {n} | {signed(mean)} ± {signed(se).lstrip('+')} | {t} |")
        return
    print(f"{len(rows)} rollouts of {len(a.runs)} run(s)\n")
    print("| prompt type | k - need | rollouts | share | S_process | S_sum | score |\n|---|---|---|---|---|---|---|")
    for (kind, off), v in levels(rows).items():
        print(f"| {kind} | {off:+d} | {v['n']} | {v['share']:.2f} | {v['process']:.3f} | {v['summary']:.3f} | "
              f"{v['score']:.3f} |")
    print("\ncalled again minus stopped at the gold's count, paired inside groups (mean ± SE over groups)\n")
    print("| prompt type | groups | S_process | S_sum | A_tool | A_sum |\n|---|---|---|---|---|---|")
    for kind, v in choice(rows).items():
        cells = " | ".join(f"{signed(v[k][0])} ± {signed(v[k][1]).lstrip('+')}" for k in CHOICE)
        print(f"| {kind} | {v['process'][2]} | {cells} |")
    print("\nrollouts with two or more calls in one turn (a block): share over the first / last third of RL steps; "
          "S_process and Success@0.9 with a block / without\n")
    print("| prompt type | share, first third | share, last third | S_process | Success@0.9 |\n|---|---|---|---|---|")
    for kind, v in blocks(rows).items():
        print(f"| {kind} | {num(v['first'])} | {num(v['last'])} | {num(v['block'][1])} / {num(v['split'][1])} | "
              f"{num(v['block'][2])} / {num(v['split'][2])} (n {v['block'][0]} / {v['split'][0]}) |")


if __name__ == "__main__":
    main()
