"""Evaluation: in-domain Toucan metrics, BFCL V3, τ²-Bench, and the training plots (SPEC §9).

    python eval.py toucan --model M --out out/toucan.jsonl         # greedy rollouts, HierR metrics
    python eval.py bfcl   --model M --out out/bfcl.jsonl           # bench_bfcl.py
    python eval.py tau2   --model M --user-model U --out out/tau2.jsonl   # bench_tau2.py
    python eval.py plot   runs/slca-s0 runs/grpo-s0 --out out/plots       # plots.py

toucan: greedy rollouts on an eval split (rollout.py), answered by the simulator (SGLS with
--sim-url, or replay offline) and scored by HierR with the judge (--judge-url, or the offline
facts judge). Metrics, overall and per parallel_type:

    Name F1      mean of the name part of Eq. 2
    ArgMatch     mean of (key + value) / 2
    Process      mean S_process (0 on an omission, Eq. 4)
    Success@0.9  the paper's definition: share with S_process >= 0.9
    Success@0.9 (code)  the released code's: share with (S_process + S_sum) / 2 >= 0.9
    Tool turns   mean assistant turns that call a tool;  Format  mean format part

Under the code's definition an irrelevant prompt can never succeed (S_sum = 0 without a tool
response, SPEC §2.2); the paper's definition gives it 0.90 when no call is made.

bfcl, tau2: the model under test is either `--model`, loaded in-process, prompted through
its own chat template with the tools and decoded greedily by rollout.generate_turn (not
stopping at </tool_call>: one reply may hold several calls); or a chat client given by
--agent-url (an OpenAI-compatible endpoint; --agent-model names the served model) or by
--agent-model alone (an in-process chat model, llm.HFClient). A client gets the tools and
the tool turns written into the chat as Hermes text (hermes.py). Replies are parsed by
segment.py's parser (rewards.predicted_calls). τ²'s user simulator is such a client too (--user-url / --user-model).
τ² runs --batch-size tasks at once on threads; `Batched` gathers their turns into batched
generate calls.

Every benchmark: --limit (first N items; τ²: N tasks per domain, a seeded subsample),
--batch-size, a progress bar, one JSONL line per finished item in --out, appended as each
batch ends; a rerun skips the items already there (results.py). The summary goes to
<out stem>.summary.json and is printed as a table.
"""
import argparse
import json
import threading
from collections import defaultdict
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from tqdm import tqdm

import bench_bfcl
import bench_tau2
import llm
from llm import load_policy
import rewards
from hermes import as_text
from results import append_jsonl, read_jsonl
from rollout import generate_turn, rollout

SUCCESS = 0.9  # SPEC §9: Success@0.9 threshold


# ---------------------------------------------------------------------------------------------
# toucan
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


def run_toucan(model, tok, tasks, simulator, judge, batch_size=64, max_turns=10, max_tokens=8192,
               out_jsonl=None):
    """evaluate() on `batch_size` tasks at a time; each task's record (id = its index in
    `tasks`, scores, turns) is appended to out_jsonl, and tasks already there are skipped.
    Returns (summary, records)."""
    done = {r["id"]: r for r in read_jsonl(out_jsonl)}
    records = [done[i] for i in range(len(tasks)) if i in done]
    todo = [i for i in range(len(tasks)) if i not in done]
    with tqdm(total=len(tasks), initial=len(records), desc="toucan", dynamic_ncols=True) as bar:
        for s in range(0, len(todo), batch_size):
            ids = todo[s:s + batch_size]
            _, scores, rs = evaluate(model, tok, [tasks[i] for i in ids], simulator, judge, batch_size,
                                     max_turns, max_tokens)
            rows = [{"id": i, "question": r.task.question, **sc, "turns": r.turns}
                    for i, sc, r in zip(ids, scores, rs)]
            append_jsonl(out_jsonl, rows)
            records += rows
            bar.update(len(rows))
    return summarize(records), records


COLUMNS = [("n", "n"), ("success", "Success@0.9"), ("success_code", "Success@0.9(code)"), ("name_f1", "NameF1"),
           ("arg_match", "ArgMatch"), ("process", "Process"), ("tool_turns", "ToolTurns"), ("format", "Format")]


def text_table(rows, columns, width=18):
    """{label: {key: number}} as a fixed-width table; columns = [(key, header)]; a missing
    or None value is left blank."""
    cell = lambda v: f"{v:>{width}.3f}" if isinstance(v, float) else f"{'' if v is None else v:>{width}}"  # noqa: E731
    lines = [f"{'':<24}" + "".join(f"{h:>{width}}" for _, h in columns)]
    lines += [f"{label:<24}" + "".join(cell(m.get(k)) for k, _ in columns) for label, m in rows.items()]
    return "\n".join(lines)


def format_table(results):
    """Rows of {label: summary["all"]} as a fixed-width text table."""
    return text_table(results, COLUMNS)


# ---------------------------------------------------------------------------------------------
# bfcl and tau2: the models behind the benchmarks' callables
def local_generate(model, tok, batch_size, max_tokens):
    """An in-process policy as generate(list_of_messages, list_of_tools) -> texts: greedy,
    one assistant turn, prompts through its own chat template with the tools."""
    def generate(batch, tools):
        seqs = [tok.encode(tok.apply_chat_template(m, tools=t or None, tokenize=False, add_generation_prompt=True),
                           add_special_tokens=False) for m, t in zip(batch, tools)]
        new = generate_turn(model, tok, seqs, [max_tokens] * len(seqs), 0.0, batch_size, stop_at_call=False)
        return [tok.decode(ids, skip_special_tokens=True) for ids in new]
    return generate


def client_generate(client, max_tokens):
    """A chat client (llm.py) as generate(...) -> texts: tools and tool turns as Hermes text,
    greedy; a failed request is an empty reply."""
    def generate(batch, tools):
        replies = client.complete([as_text(m, t) for m, t in zip(batch, tools)], 0.0, max_tokens)
        return [r or "" for r in replies]
    return generate


class Batched:
    """A batch generate(...) -> texts, shared by threads as fn(messages, tools) -> text.

    A call waits while a batch runs; the calls waiting then (up to `size`) go into the next
    batch together, so τ²'s concurrent tasks share one model call per round of turns."""

    def __init__(self, generate, size):
        self.generate, self.size = generate, size
        self.queue, self.lock, self.busy = [], threading.Lock(), threading.Lock()

    def __call__(self, messages, tools):
        job = Future()
        with self.lock:
            self.queue.append((messages, tools, job))
        while not job.done():
            with self.busy:  # one batch at a time; whoever holds it serves the head of the queue
                with self.lock:
                    batch, self.queue = self.queue[:self.size], self.queue[self.size:]
                if not batch:
                    continue
                try:
                    texts = self.generate([b[0] for b in batch], [b[1] for b in batch])
                    if len(texts) != len(batch):
                        raise ValueError(f"generate returned {len(texts)} texts for {len(batch)} prompts")
                except Exception as e:  # every waiting task sees the failure (scored 0 by tau2)
                    for *_, j in batch:
                        j.set_exception(e)
                    continue
                for (*_, j), text in zip(batch, texts):
                    j.set_result(text)
        return job.result()


def agent_generate(a):
    """The model under test: --agent-url/--agent-model (a client), else --model (in-process)."""

    client = llm.client_from_args(a, "agent")
    if client is not None and a.model:
        raise SystemExit("give either --model or --agent-url/--agent-model, not both")
    if client is not None:
        return client_generate(client, a.max_tokens)
    if not a.model:
        raise SystemExit("give --model (in-process) or --agent-url/--agent-model (a chat client)")
    model, tok = load_policy(a.model, a.dtype, a.device)
    return local_generate(model.eval(), tok, a.batch_size, a.max_tokens)


# ---------------------------------------------------------------------------------------------
def get_args(argv=None):
    fmt = {"formatter_class": argparse.ArgumentDefaultsHelpFormatter}
    p = argparse.ArgumentParser(description="Evaluate a policy (SPEC §9), or plot training runs", **fmt)
    sub = p.add_subparsers(dest="bench", required=True)

    def bench(name, what, batch_size, batch_help, max_tokens, tokens_help):
        s = sub.add_parser(name, help=what, **fmt)
        s.add_argument("--out", required=True, help="per-item results, JSONL; an existing file is resumed")
        s.add_argument("--batch-size", type=int, default=batch_size, help=batch_help)
        s.add_argument("--max-tokens", type=int, default=max_tokens, help=tokens_help)
        s.add_argument("--device", default=None, help="default: cuda if available, else cpu")
        s.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32")
        return s

    t = bench("toucan", "greedy rollouts on an eval split, HierR metrics", 64, "tasks per generate call",
              8192, "response tokens per trajectory (SPEC §6)")
    t.add_argument("--model", required=True, help="hub name or local folder")
    t.add_argument("--data", default="data/world/eval.jsonl")
    t.add_argument("--limit", type=int, default=None, help="first N tasks only")
    t.add_argument("--max-turns", type=int, default=10, help="assistant turns per trajectory (SPEC §6)")
    t.add_argument("--sim-backend", choices=["replay", "llm"], default=None,
                   help="default: llm when a sim client is set, else replay")
    llm.add_client_flags(t, "sim")
    llm.add_client_flags(t, "judge")

    b = bench("bfcl", "BFCL V3 single-turn AST accuracy", 8, "prompts per generate call",
              4096, "per reply (bfcl-eval's OSS handlers cap it at 4096)")
    b.add_argument("--categories", nargs="+", default=list(bench_bfcl.AST_CATEGORIES),
                   choices=bench_bfcl.AST_CATEGORIES + bench_bfcl.RELEVANCE_CATEGORIES, metavar="CATEGORY",
                   help="the 8 AST categories; irrelevance, live_irrelevance, live_relevance are optional")
    b.add_argument("--limit", type=int, default=None, help="first N items of each category")

    u = bench("tau2", "τ²-Bench pass^1 (airline, retail, telecom)", 1,  # tau2's run_tasks default max_concurrency
              "tasks run at once, their turns batched", 4096, "per reply, agent and user")
    u.add_argument("--domains", nargs="+", default=list(bench_tau2.DOMAINS), choices=bench_tau2.DOMAINS)
    u.add_argument("--num-tasks", "--limit", type=int, default=None, help="tasks per domain, a seeded subsample")
    u.add_argument("--seed", type=int, default=0, help="seed of the subsample")
    u.add_argument("--max-steps", type=int, default=bench_tau2.MAX_STEPS, help="messages per episode")
    llm.add_client_flags(u, "user")

    for s in (b, u):
        s.add_argument("--model", default=None, help="the policy in-process: hub name or local folder")
        llm.add_client_flags(s, "agent")

    g = sub.add_parser("plot", help="training curves, reward parts and advantage statistics as PNGs", **fmt)
    g.add_argument("runs", nargs="+", help="run folders of train.py (metrics.jsonl, eval.jsonl)")
    g.add_argument("--out", default="out/plots", help="folder for the PNGs")
    g.add_argument("--smooth", type=int, default=1, help="moving average over N steps")
    a = p.parse_args(argv)
    if a.bench != "plot":
        import torch
        a.device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    return a


def main(argv=None):
    a = get_args(argv)
    if a.bench == "plot":
        import plots
        for path in plots.plot_runs(a.runs, a.out, a.smooth):
            print("wrote", path)
        return None
    if a.bench == "toucan":
        from data import load_tasks
        from simulator import Simulator

        model, tok = load_policy(a.model, a.dtype, a.device)
        tasks = load_tasks(a.data)[:a.limit]
        sim_client = llm.client_from_args(a, "sim")
        sim = Simulator(a.sim_backend or ("llm" if sim_client else "replay"), client=sim_client)
        judge_client = llm.client_from_args(a, "judge")
        judge = llm.LLMJudge(judge_client) if judge_client else rewards.FactsJudge()
        summary, _ = run_toucan(model.eval(), tok, tasks, sim, judge, a.batch_size, a.max_turns, a.max_tokens, a.out)
        print(format_table(summary))
    elif a.bench == "bfcl":
        summary = bench_bfcl.run_bfcl(agent_generate(a), a.categories, a.limit, a.batch_size, a.out)
        rows = {**summary["per_category"], **{k: {"accuracy": v} for k, v in summary.items() if k != "per_category"}}
        print(text_table(rows, [("total", "n"), ("accuracy", "accuracy")], width=10))
    else:
        user = llm.client_from_args(a, "user")
        if user is None:
            raise SystemExit("give the user simulator: --user-url (an endpoint) or --user-model (in-process)")
        agent_fn, user_fn = (Batched(g, a.batch_size) for g in (agent_generate(a), client_generate(user, a.max_tokens)))
        summary = bench_tau2.run_tau2(a.domains, lambda m, t: bench_tau2.parse_reply(agent_fn(m, t)),
                                      lambda m, t: bench_tau2.parse_reply(user_fn(m, t)), a.num_tasks, a.out,
                                      a.seed, a.batch_size, a.max_steps)
        rows = {**summary["per_domain"], "overall": {"pass^1": summary["overall"]},
                "overall (per task)": {"pass^1": summary["overall_micro"]}}
        print(text_table(rows, [("n", "n"), ("pass^1", "pass^1"), ("errors", "errors")], width=10))
    path = Path(a.out).with_suffix(".summary.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=1))
    print("results:", a.out, "summary:", path)
    return summary


if __name__ == "__main__":
    main()
