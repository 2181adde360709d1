"""The evaluation's command-line plumbing, shared by `python eval.py` and `python -m bench`:
result files, fingerprints, tables, the run's config as defaults, and `aggregate`.

Result files (toucan's, and bfcl's and tau2's of `python -m bench`): JSONL, first a
fingerprint line {"fingerprint": {...}} (benchmark, model with a digest of its files, data, and
every setting that changes the numbers), then one line per item, appended as items finish. A
rerun with the same --out skips the items already there; a rerun whose fingerprint differs
(another model, another budget, ...) stops with a one-line error instead of mixing results. A
line cut by a crash does not parse: it is dropped on reading and the item runs again. --limit
takes the first N items (τ²: N tasks per domain, a seeded subsample). The summary goes to
<out stem>.summary.json (with the fingerprint) and is printed as a table.

`eval.py toucan --model RUN/final` (or RUN/sft for the "before RL" row) takes every setting it
shares with train.py from the run's config.json (--run-config auto): the eval split and limit
(--data, --limit), --gen-batch (--batch-size), the caps, --sampler, --dtype, --strict-calls,
--summary-gate, the simulator's flags (--sim-*, --schema-check, --no-sgls, --malformed) and the
judge's (--judge-*); flags given on the command line win. Run from the folder the run was
started in (its data paths are relative to it), it prints the run's "after RL" row exactly for a
single-process run with a deterministic simulator and judge (replay or a warm --sim-cache; the
facts judge or a greedy one); a sampled LLM simulator, or a multi-process run (FSDP gathers its
weights in --dtype), give other numbers.

aggregate: the paper's tables are means ± std over three runs. Given several summary files (or
their result files), it gives the mean and the sample standard deviation of every number they
share.
"""
import argparse
import hashlib
import json
import os
import statistics
from pathlib import Path

from lib.frozen import llm
from lib.runs.config import bound, settings
from lib.runs.files import read_jsonl

MIB = 1 << 20                      # bytes read from each end of a file for its digest


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


def write_summary(out, fp, summary):
    """Write <out stem>.summary.json (the summary under its fingerprint), say where; return it."""
    summary = {"fingerprint": fp, **summary}
    path = Path(out).with_suffix(".summary.json")
    path.write_text(json.dumps(summary, indent=1))
    print("results:", out, "summary:", path)
    return summary


def text_table(rows, columns, width=18):
    """{label: {key: number}} as a fixed-width table; columns = [(key, header)]; a missing
    or None value is left blank; the label column fits the longest label."""
    cell = lambda v: f"{v:>{width}.3f}" if isinstance(v, float) else f"{'' if v is None else v:>{width}}"  # noqa: E731
    w = max([24] + [len(label) + 2 for label in rows])
    lines = [f"{'':<{w}}" + "".join(f"{h:>{width}}" for _, h in columns)]
    lines += [f"{label:<{w}}" + "".join(cell(m.get(k)) for k, _ in columns) for label, m in rows.items()]
    return "\n".join(lines)


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


def flag(a, role, field):
    """--{role}-{field}, else env SLCA_{ROLE}_{FIELD} (as lib.frozen.llm.client reads them)."""
    return getattr(a, f"{role}_{field}", None) or os.environ.get(f"SLCA_{role.upper()}_{field.upper()}")


def llm_client(a, role):
    """The frozen LLM a command's --{role}-* flags name (lib.frozen.llm.client; flags the role lacks keep their defaults)."""
    return llm.client(role, settings(llm.Client, a, prefix=f"{role}_"))


def who(a, role):
    """The model behind a role for the fingerprint: its URL (+ served name), else the
    in-process model (ident; the agent's --model first), else None."""
    if flag(a, role, "url"):
        return f"{flag(a, role, 'url')} {flag(a, role, 'model') or ''}".strip()
    return ident((a.model if role == "agent" else None) or flag(a, role, "model"))


def fingerprint(a):
    """Everything that changes toucan's per-item results (see the module docstring). Item
    selection (--limit) is not in it: rows are keyed by item."""
    fp = {"bench": a.bench, "dtype": a.dtype, "max_tokens": a.max_tokens}
    return {**fp, "model": ident(a.model), "data": ident(a.data), "max_turns": a.max_turns,
            "max_tool_rounds": a.max_tool_rounds, "max_prompt_tokens": a.max_prompt_tokens,
            "strict_calls": a.strict_calls, "summary_gate": a.summary_gate, "reward_input": a.reward_input,
            "sampler": a.sampler,
            "sim": [a.sim_backend or ("llm" if who(a, "sim") else "replay"), who(a, "sim")],
            "schema_check": a.schema_check, "no_sgls": a.no_sgls, "malformed": a.malformed,
            "judge": who(a, "judge") or "facts", "sim_parse": a.sim_parse, "json_depth": a.json_depth,
            "prompts": hashlib.sha256((a.sim_template + a.judge_template).encode()).hexdigest()[:16]}


FMT = {"formatter_class": argparse.ArgumentDefaultsHelpFormatter}


def bench_parser(sub, name, what, *, batch_size, batch_help, max_tokens, tokens_help):
    """A subcommand with the flags every benchmark has: its result file, batch, budget, device."""
    s = sub.add_parser(name, help=what, **FMT)
    s.add_argument("--out", required=True, help="per-item results, JSONL; an existing file is resumed "
                                                "if its fingerprint matches")
    bound(s.add_argument("--batch-size", type=int, default=batch_size, help=batch_help), "[1, 1e7]")
    bound(s.add_argument("--max-tokens", type=int, default=max_tokens, help=tokens_help), "[1, 1e7]")
    s.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    s.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32")
    return s


def run_config(model, path="auto"):
    """The train.py config (its config.json: every flag's value) that `path` names; {} for "none",
    and for "auto" unless `model` is a run's final/, final/merged/ (--merge-lora) or sft/ folder (one
    holding run.json, inside the run folder holding config.json, or one level further in)."""
    if path == "auto":
        ups = [os.path.join(model, *[os.pardir] * n, "config.json") for n in (1, 2)]
        path = next((p for p in ups if os.path.isfile(p)), "")
        if not (os.path.isfile(os.path.join(model, "run.json")) and path):
            return {}
    if path == "none":
        return {}
    try:
        config = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"--run-config {path}: {e}") from None
    if not isinstance(config, dict):
        raise SystemExit(f"--run-config {path}: not a train.py config (a JSON object)")
    return config


def aggregate_command(summaries, out=None):
    """`eval.py aggregate`: print aggregate(summaries) as a table, write it to `out` as JSON if given; return it."""
    table = aggregate(summaries)
    print(text_table({k: {"mean ± std": f"{v['mean']:.4f} ± {v['std']:.4f}", "n": v["n"]}
                      for k, v in table.items()}, [("mean ± std", "mean ± std"), ("n", "runs")], width=20))
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(table, indent=1))
    return table
