"""Does a policy read a call's contested argument from the question? (docs/experiments/wrong-value.md)

    python -m experiments.value_reading runs/reproduce/*-wrong-k*-s3

For each run directory (its config.json names the --data file, its rollouts.jsonl the sampled
trajectories): over the marked training rollouts (rows with extra_info.bonus_args), for each
contested argument (a key of bonus_args), the share of the marked tool's first calls that
write the gold value, beside chance: the policy's written values against the gold values of
all marked prompts, sum over v of P(gold = v) * P(written = v). A match rate at chance means
the policy writes the value without reading it from the question, so a push on it cannot
depend on which value a question asks for: it averages out across prompts.
"""
import argparse
import collections
import json
import os
import sys


def marked(data):
    """{question: (marked tool, {contested key: gold value})} of a data file's marked rows."""
    out = {}
    for line in open(data):
        row = json.loads(line)
        info, truth = row["extra_info"], row["reward_model"]["ground_truth"]
        if "bonus_args" not in info:
            continue
        gold = next(c for step in json.loads(truth["gold_tool_calls"]) for c in step if c["name"] == info["bonus_call"])
        out[truth["question_content"]] = (info["bonus_call"], {k: gold["arguments"].get(k)
                                                               for k in json.loads(info["bonus_args"])})
    return out


def reading(run):
    """{key: (calls, match rate, chance rate)} over the run's marked rollouts."""
    rows = marked(json.load(open(os.path.join(run, "config.json")))["data"])
    pairs = collections.defaultdict(list)  # key -> [(gold, written)]
    for line in open(os.path.join(run, "rollouts.jsonl")):
        r = json.loads(line)
        if r["question"] not in rows:
            continue
        tool, gold = rows[r["question"]]
        call = next((c for t in r["turns"] for c in t["calls"] if c["name"] == tool), None)
        if call is None or not isinstance(call["arguments"], dict):
            continue
        for k, v in gold.items():
            pairs[k].append((json.dumps(v), json.dumps(call["arguments"].get(k))))
    out = {}
    for k, ps in pairs.items():
        n = len(ps)
        golds, written = collections.Counter(g for g, _ in ps), collections.Counter(w for _, w in ps)
        chance = sum(golds[v] * written[v] for v in golds) / n ** 2
        out[k] = (n, sum(g == w for g, w in ps) / n, chance)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("runs", nargs="+", help="train.py output directories (config.json, rollouts.jsonl)")
    a = p.parse_args(argv)
    for run in a.runs:
        try:
            got = reading(run)
        except (OSError, ValueError, KeyError, StopIteration) as e:
            sys.exit(f"{run}: not a run of a --wrong world ({type(e).__name__}: {e})")
        print(f"{run}: " + "; ".join(f"{k} written as the gold value on {m:.3f} of {n} calls (chance {c:.3f})"
                                     for k, (n, m, c) in sorted(got.items())))


if __name__ == "__main__":
    main()
