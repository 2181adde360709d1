"""Evaluation: the in-domain Toucan metrics (SPEC §9).

Greedy rollouts on an eval split, answered by the simulator (SGLS, or replay offline) and
scored by HierR with the judge. Metrics, overall and per parallel_type:

    Name F1      mean of the name part of Eq. 2
    ArgMatch     mean of (key + value) / 2
    Process      mean S_process (0 on an omission, Eq. 4)
    Success@0.9  the paper's definition: share with S_process >= 0.9
    Success@0.9 (code)  the released code's: share with (S_process + S_sum) / 2 >= 0.9
    Tool turns   mean assistant turns that call a tool;  Format  mean format part

Under the code's definition an irrelevant prompt can never succeed (S_sum = 0 without a tool
response, SPEC §2.2); the paper's definition gives it 0.90 when no call is made.

    python eval.py toucan --model runs/demo/final --data data/world/eval.jsonl
"""
import argparse
import json
import os
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

import rewards
from rollout import rollout

SUCCESS = 0.9  # SPEC §9: Success@0.9 threshold


def score_rollouts(rs, judge, weights=None, lam_tool=1.0, lam_sum=1.0, workers=16):
    """HierR for each rollout (rewards.score), plus what the logs need from the rollout.
    Rollouts are scored on `workers` threads, so a remote judge answers them concurrently."""
    def one(r):
        s = rewards.score(r.text, r.final, r.observations, r.task, judge, weights, lam_tool, lam_sum)
        s.update(tool_turns=r.tool_turns, stop=r.stop, length=len(r.ids),
                 parallel_type=r.task.parallel_type or "unknown")
        return s

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(one, rs))


def summarize(scores):
    """The metrics table of the module docstring, overall and per parallel_type."""
    def table(rows):
        n = len(rows)
        mean = lambda f: sum(map(f, rows)) / n  # noqa: E731
        return {"n": n,
                "name_f1": mean(lambda s: s["name"]),
                "arg_match": mean(lambda s: (s["key"] + s["value"]) / 2),
                "process": mean(lambda s: s["process"]),
                "success": mean(lambda s: s["process"] >= SUCCESS),
                "success_code": mean(lambda s: (s["process"] + s["summary"]) / 2 >= SUCCESS),
                "tool_turns": mean(lambda s: s["tool_turns"]),
                "format": mean(lambda s: s["format"])}
    by_type = defaultdict(list)
    for s in scores:
        by_type[s["parallel_type"]].append(s)
    return {"all": table(scores), **{k: table(v) for k, v in sorted(by_type.items())}}


def evaluate(model, tok, tasks, simulator, judge, batch_size=64, max_turns=10, max_tokens=8192):
    """Greedy rollouts on `tasks`; returns (summary, per-task scores, rollouts)."""
    rs = rollout(model, tok, tasks, simulator, temperature=0.0, max_turns=max_turns,
                 max_tokens=max_tokens, batch_size=batch_size)
    scores = score_rollouts(rs, judge)
    return summarize(scores), scores, rs


COLUMNS = [("success", "Success@0.9"), ("success_code", "Success@0.9(code)"), ("name_f1", "NameF1"),
           ("arg_match", "ArgMatch"), ("process", "Process"), ("tool_turns", "ToolTurns"), ("format", "Format")]


def format_table(results):
    """Rows of {label: summary["all"]} as a fixed-width text table."""
    head = f"{'':<16}" + "".join(f"{c:>18}" for _, c in COLUMNS)
    lines = [head]
    for label, m in results.items():
        lines.append(f"{label:<16}" + "".join(f"{m[k]:>18.3f}" for k, _ in COLUMNS))
    return "\n".join(lines)


def main():
    import llm
    from data import load_tasks
    from simulator import Simulator
    from train import load_policy

    p = argparse.ArgumentParser(description="Evaluate a policy on an in-domain split")
    sub = p.add_subparsers(dest="bench", required=True)
    t = sub.add_parser("toucan", help="greedy rollouts on an eval split, HierR metrics")
    t.add_argument("--model", required=True, help="hub name or local folder")
    t.add_argument("--data", default="data/world/eval.jsonl")
    t.add_argument("--limit", type=int, default=None, help="first N tasks only")
    t.add_argument("--batch-size", type=int, default=64)
    t.add_argument("--max-turns", type=int, default=10)
    t.add_argument("--max-tokens", type=int, default=8192)
    t.add_argument("--out", default=None, help="JSON file for the results (default: print only)")
    t.add_argument("--sim-backend", choices=["replay", "llm"], default="replay")
    llm.add_client_flags(t, "sim")
    llm.add_client_flags(t, "judge")
    a = p.parse_args()

    model, tok = load_policy(a.model)
    tasks = load_tasks(a.data)[:a.limit]
    sim = Simulator(a.sim_backend, client=llm.client_from_args(a, "sim"))
    judge_client = llm.client_from_args(a, "judge")
    judge = llm.LLMJudge(judge_client) if judge_client else rewards.FactsJudge()
    summary, _, _ = evaluate(model.eval(), tok, tasks, sim, judge, a.batch_size, a.max_turns, a.max_tokens)
    print(format_table({k: v for k, v in summary.items()}))
    if a.out:
        os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
        with open(a.out, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
