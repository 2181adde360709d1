"""BFCL V3, single turn: AST accuracy of a Hermes-format tool caller (SPEC §9).

Package bfcl-eval==2025.7.17 ships the questions, the possible answers and the checker.
This module holds no model code: `run_bfcl` takes a plain callable

    generate(list_of_messages, list_of_tools) -> list_of_texts   (one reply per item)

and eval.py plugs in a model (in-process or an endpoint). Install the optional extra:
    pip install -r requirements-bench.txt && pip install --no-deps -r requirements-bench-nodeps.txt

What runs: the AST categories simple, multiple, parallel, parallel_multiple, live_simple,
live_multiple, live_parallel, live_parallel_multiple (AST_CATEGORIES), and, if asked for,
the relevance categories irrelevance, live_irrelevance, live_relevance. Java and JavaScript
are not run (their answers must be written as Java/JS source strings).

Prompt: the item's first-turn messages as they are (some live items start with a system
message) plus an OpenAI-style tool list. The tools are BFCL's function docs converted the
way bfcl-eval's own OSS handlers do it (model_handler.utils.func_doc_language_specific_pre_
processing + convert_to_tool(GORILLA_TO_OPENAPI, OSSMODEL)): a " Note that the provided
function is in Python 3 syntax." hint on every description, type dict -> object, float ->
number (with format "float" and a hint in the description), tuple -> array, any -> string,
and "." in function names -> "_". The caller's chat template renders them (Qwen2.5 puts them
in <tools></tools>, SPEC §6).

Output parsing: rewards.predicted_calls (segment.py's parser, the format rule of Eq. 2),
<think> blocks removed first; a block holds one call object or a JSON list of them; several
blocks are concatenated. As in bfcl-eval's Qwen FC handler, one malformed block (not JSON,
no name, arguments not an object) makes the whole output "no call" (decoded = []); so does
an unclosed <tool_call> (bfcl-eval ignores that one), i.e. the output counts only when its
format part is 1.

Scoring: bfcl-eval's own ast_checker (language Python, test_category = the category name)
with underscore_to_dot=True, because the model saw "_" names. The package's
constants.model_config imports every API SDK, so a stand-in module that only maps
MODEL_NAME is put in sys.modules before the checker is imported. Relevance categories are
scored as BFCL does: irrelevance passes when no call decodes, live_relevance when one does.

Aggregation, as bfcl_eval.eval_checker.eval_runner_helper.generate_leaderboard_csv:
    non_live_ast = UNWEIGHTED mean of simple, multiple, parallel, parallel_multiple (BFCL's
                   "simple" is itself the mean of python/java/javascript simple; here it is
                   python simple only),
    live_ast     = mean of the four live AST categories WEIGHTED by item count,
    overall_ast  = unweighted mean of non_live_ast and live_ast (BFCL's single-turn formula,
                   restricted to the AST summaries),
    non_live_overall / live_overall = the same with irrelevance added (unweighted) /
                   live_irrelevance + live_relevance added (weighted), only when run.
A category that was not run is left out of a mean (BFCL would count it as 0).

Known data errors: 6 of the 2,351 AST items fail even with their own ground truth
(simple_363, live_simple_106-63-0, live_simple_112-68-0, live_multiple_507-149-4,
live_multiple_862-181-3, live_multiple_964-207-0: name mismatch, empty or extra answers).

Results: each scored item is appended to out_jsonl (results.py); a restart skips the ids
already there. `gold_output(item)` renders BFCL's first possible answer as Hermes text (an
oracle for tests and smoke runs).

    python eval.py bfcl --model runs/demo/final --out out/bfcl.jsonl --limit 20
"""
import copy
import json
import sys
import types
from pathlib import Path

from tqdm import tqdm

from results import append_jsonl, read_jsonl
from rewards import predicted_calls

AST_CATEGORIES = ("simple", "multiple", "parallel", "parallel_multiple",
                  "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple")
RELEVANCE_CATEGORIES = ("irrelevance", "live_irrelevance", "live_relevance")
MODEL_NAME = "slca-grpo-hermes"  # key of the stand-in model config (no "_" in it)
PYTHON_HINT = " Note that the provided function is in Python 3 syntax."  # bfcl-eval's pre-processing


def checker():
    """Import bfcl-eval's AST checker without its SDK-importing model_config; returns the module."""
    name = "bfcl_eval.constants.model_config"
    entry = types.SimpleNamespace(underscore_to_dot=True, display_name=MODEL_NAME)
    if name not in sys.modules:
        stub = types.ModuleType(name)
        stub.__doc__ = "Stand-in for bfcl-eval's model_config (which imports every API SDK)."
        stub.MODEL_CONFIG_MAPPING = {}
        sys.modules[name] = stub
    sys.modules[name].MODEL_CONFIG_MAPPING.setdefault(MODEL_NAME, entry)
    from bfcl_eval.eval_checker.ast_eval import ast_checker

    return ast_checker


def data_dir():
    import bfcl_eval  # not bfcl_eval.constants.eval_config: importing it creates folders

    return Path(bfcl_eval.__file__).parent / "data"


def load(category, limit=None):
    """The first `limit` items of a category: {id, category, messages, functions, ground_truth}.

    ground_truth is BFCL's possible answer (None for the relevance categories)."""
    path = data_dir() / f"BFCL_v3_{category}.json"
    if not path.exists():
        raise ValueError(f"unknown BFCL category {category!r}")
    answers = {}
    if category not in RELEVANCE_CATEGORIES:
        answers = {r["id"]: r["ground_truth"] for r in read_jsonl(data_dir() / "possible_answer" / path.name)}
    rows = read_jsonl(path)[:limit]
    return [{"id": r["id"], "category": category, "messages": r["question"][0], "functions": r["function"],
             "ground_truth": answers.get(r["id"])} for r in rows]


def _cast_to_openai_type(properties, mapping):
    """bfcl_eval.model_handler.utils._cast_to_openai_type (that module needs tree-sitter)."""
    for value in properties.values():
        var_type = value.get("type")
        if var_type is None:
            value["type"] = "string"
        else:
            if var_type == "float":
                value["format"] = "float"
                value["description"] = value.get("description", "") + " This is a float type value."
            value["type"] = mapping.get(var_type, "string")
        if value["type"] in ("array", "object"):
            if "properties" in value:
                value["properties"] = _cast_to_openai_type(value["properties"], mapping)
            elif "items" in value:
                items = value["items"]
                items["type"] = mapping[items["type"]]
                if items["type"] == "array" and "items" in items:
                    items["items"]["type"] = mapping[items["items"]["type"]]
                elif items["type"] == "object" and "properties" in items:
                    items["properties"] = _cast_to_openai_type(items["properties"], mapping)
    return properties


def openai_tools(functions):
    """BFCL function docs -> OpenAI tool list, as bfcl-eval prepares them for OSS FC models."""
    from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI  # dict -> object, float -> number, ...

    out = []
    for fn in copy.deepcopy(functions):
        fn["description"] = fn["description"] + PYTHON_HINT
        fn["name"] = fn["name"].replace(".", "_")
        params = fn["parameters"]
        params["type"] = "object"
        params["properties"] = _cast_to_openai_type(params["properties"], GORILLA_TO_OPENAPI)
        out.append({"type": "function", "function": fn})
    return out


def to_chat(item):
    """An item -> (chat messages, OpenAI tool list) for the generate callable."""
    return copy.deepcopy(item["messages"]), openai_tools(item["functions"])


def decode(text):
    """Hermes output -> BFCL's decoded form [{name: {arg: value}}]; [] when no valid call."""
    blocks, found = predicted_calls(text)
    if len(blocks) < found:  # a malformed or unclosed block voids the output
        return []
    return [{c.name: c.arguments} for b in blocks for c in b]


def score(item, text):
    """Score one output with bfcl-eval's checker -> {valid, error_type, error, decoded}."""
    decoded = decode(text)
    category = item["category"]
    if category in RELEVANCE_CATEGORIES:
        wants_call = category == "live_relevance"
        valid = (len(decoded) > 0) == wants_call
        error_type = None if valid else f"{category}_error:{'no_call' if wants_call else 'has_call'}"
        return {"valid": valid, "error_type": error_type, "error": None, "decoded": decoded}
    try:
        res = checker().ast_checker(item["functions"], decoded, item["ground_truth"],
                                    "Python", category, MODEL_NAME)
    except Exception as e:  # the checker can trip over odd values; that is a miss
        res = {"valid": False, "error_type": "checker_exception", "error": [repr(e)]}
    if res["valid"]:
        return {"valid": True, "error_type": None, "error": None, "decoded": decoded}
    return {"valid": False, "error_type": res.get("error_type"),
            "error": json.dumps(res.get("error"), default=str)[:500], "decoded": decoded}


def gold_output(item, as_list=False):
    """BFCL's first possible answer rendered as Hermes text (an oracle for tests and smoke runs).

    Optional parameters ("" among the options, not required) are left out. as_list=True puts
    all calls in one <tool_call> block as a JSON list (the SLCA eval format); else one block
    per call."""
    required = {f["name"]: set(f["parameters"].get("required", [])) for f in item["functions"]}

    def pick(options, must=False):  # -> (keep?, first option); "" among options = optional
        if "" in options and not must:
            return False, None
        return True, next((o for o in options if o != ""), None)

    def flat(d):  # dict parameters hold option lists one level down
        return {k: o for k, opts in d.items() for keep, o in [pick(opts)] if keep}

    calls = []
    for answer in item["ground_truth"]:
        (name, params), = answer.items()
        args = {}
        for k, opts in params.items():
            keep, v = pick(opts, must=k in required.get(name, ()))
            if isinstance(v, dict):
                v = flat(v)
            elif isinstance(v, list) and v and all(isinstance(d, dict) for d in v):
                v = [flat(d) for d in v]
            if keep:
                args[k] = v
        calls.append({"name": name.replace(".", "_"), "arguments": args})
    if as_list:
        return "<tool_call>\n" + json.dumps(calls) + "\n</tool_call>"
    return "\n".join("<tool_call>\n" + json.dumps(c) + "\n</tool_call>" for c in calls)


def _mean(xs):
    xs = list(xs)
    return sum(xs) / len(xs) if xs else None


def summarize(records):
    """Per-category accuracy and BFCL's summary numbers (see the module docstring)."""
    per = {}
    for r in records:
        c = per.setdefault(r["category"], {"correct": 0, "total": 0})
        c["total"] += 1
        c["correct"] += int(bool(r["valid"]))
    for c in per.values():
        c["accuracy"] = c["correct"] / c["total"]

    def unweighted(cats):
        return _mean(per[c]["accuracy"] for c in cats if c in per)

    def weighted(cats):
        n = sum(per[c]["total"] for c in cats if c in per)
        return sum(per[c]["correct"] for c in cats if c in per) / n if n else None

    non_live, live = AST_CATEGORIES[:4], AST_CATEGORIES[4:]
    out = {"per_category": per, "non_live_ast": unweighted(non_live), "live_ast": weighted(live)}
    out["overall_ast"] = _mean(v for v in (out["non_live_ast"], out["live_ast"]) if v is not None)
    if "irrelevance" in per:
        out["non_live_overall"] = unweighted(non_live + ("irrelevance",))
    if "live_irrelevance" in per or "live_relevance" in per:
        out["live_overall"] = weighted(live + ("live_irrelevance", "live_relevance"))
    return out


def run_bfcl(generate, categories=AST_CATEGORIES, limit=None, batch_size=8, out_jsonl=None):
    """Generate, score and aggregate the first `limit` items of each category, `batch_size`
    prompts per generate call. Resumes from out_jsonl. Returns summarize(...)."""
    items = [it for c in categories for it in load(c, limit)]
    wanted = {it["id"] for it in items}
    done = {r["id"]: r for r in read_jsonl(out_jsonl) if r.get("id") in wanted}
    pending = [it for it in items if it["id"] not in done]
    records = list(done.values())
    with tqdm(total=len(items), initial=len(done), desc="BFCL", dynamic_ncols=True) as bar:
        for start in range(0, len(pending), batch_size):
            batch = pending[start:start + batch_size]
            chats = [to_chat(it) for it in batch]
            texts = generate([m for m, _ in chats], [t for _, t in chats])
            if len(texts) != len(batch):
                raise ValueError(f"generate returned {len(texts)} texts for {len(batch)} prompts")
            rows = [{"id": it["id"], "category": it["category"], "output": text, **score(it, text)}
                    for it, text in zip(batch, texts)]
            append_jsonl(out_jsonl, rows)
            records.extend(rows)
            bar.update(len(batch))
    return summarize(records)
