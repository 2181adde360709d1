"""BFCL V3: accuracy of a Hermes-format tool caller, single-turn and multi-turn (docs/method.md §9).

Package bfcl-eval==2025.7.17 ships the questions, the possible answers, the checkers and the
multi-turn backends. This module holds no model code: `run_bfcl` takes a plain callable

    generate(list_of_messages, list_of_tools) -> list_of_texts   (one reply per item)

and eval.py plugs in a model (in-process or an endpoint) with the prompt framing (the
release's Toucan-style system prompt by default, bench/hermes.py). Install the extra:
    pip install -r requirements-bench.txt && pip install --no-deps -r requirements-bench-nodeps.txt

Categories. RELEASE_CATEGORIES is the release's list (eval/bfcl_v3): simple, multiple,
parallel, parallel_multiple, java, javascript, the four live AST categories, and
multi_turn_base / miss_func / miss_param. Also selectable: irrelevance, live_irrelevance,
live_relevance and multi_turn_long_context (the release leaves them out).

Tools: BFCL's function docs converted the way bfcl-eval's own OSS handlers do it
(func_doc_language_specific_pre_processing + convert_to_tool(GORILLA_TO_OPENAPI, OSSMODEL)):
a language hint on every description (Python 3, Java 8 SDK or JavaScript); for java and
javascript every parameter becomes a string holding source code, its type named in the
description; type dict -> object, float -> number (with a hint), tuple -> array, any ->
string; "." in function names -> "_".

Output parsing: rewards.predicted_calls (segment.py's parser), <think> blocks removed; a
block holds one call object or a JSON list of them; several blocks are concatenated. As in
bfcl-eval's Qwen FC handler, one malformed block (not JSON, no name, arguments not an
object) makes the whole output "no call"; so does an unclosed <tool_call>.

Single-turn scoring: bfcl-eval's ast_checker (language Python, Java or JavaScript) with
underscore_to_dot=True, because the model saw "_" names. Its constants.model_config imports
every API SDK, so a stand-in module that only maps MODEL_NAME goes into sys.modules first.
Relevance categories: irrelevance passes when no call decodes, live_relevance when one
does. A Java/JavaScript value with more than MAX_BRACKETS "[" or "{" is scored wrong
without the checker (bfcl-eval's JavaScript collection parser backtracks exponentially on
nested brackets; the answers hold at most 6).

Multi-turn (runs offline: the backends are plain Python classes). bfcl-eval's FC inference
loop (base_handler.inference_multi_turn_FC): per turn, the turn's user message (in
miss_func, at the held-out turn, the missing functions join the tool list and the user says
DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC); per step, one reply; its calls run on the
item's backend instances (GorillaFileSystem, TradingBot, ...) and their results come back
as tool messages; a reply without a call ends the turn; more than MAXIMUM_STEP_LIMIT (20)
steps ends the item (force-terminated, scored wrong unless it was the last turn). Items run
`batch_size` at a time; a finished item frees its slot for the next. Scoring is bfcl-eval's
multi_turn_checker (state of every backend and the ground truth's results, turn by turn).
Deviation, for safety: bfcl-eval executes calls by eval() of Python source; here a call runs
as getattr(instance, name)(**arguments) on structured JSON values, and the checker's
executor is replaced (`_checker_execute`) by one that reads the call strings with
ast.literal_eval, so no model text is ever evaluated. Same method table, same results text,
same refused names. Two arguments whose size sets the backends' work (MathAPI's power
exponent and the logarithm / square_root precision) are refused above LIMITS.

Aggregation, as bfcl_eval.eval_checker.eval_runner_helper.generate_leaderboard_csv except multi_turn:
    simple_ast       = unweighted mean of simple, java, javascript,
    non_live_ast     = unweighted mean of simple_ast, multiple, parallel, parallel_multiple,
    live_ast         = mean of the four live AST categories WEIGHTED by item count,
    overall_ast      = unweighted mean of non_live_ast and live_ast,
    non_live_overall / live_overall = the same with irrelevance (unweighted) /
                       live_irrelevance + live_relevance (weighted) added, when run,
    multi_turn       = unweighted mean of multi_turn_base and the mean of miss_func, miss_param and
                       long_context WEIGHTED by item count (evalscope's bfcl_v3 adapter, which the
                       release ran: base 1/2, miss_func and miss_param 1/4 each at equal counts;
                       BFCL's own leaderboard takes the unweighted mean of the four),
    overall          = unweighted mean of the non-live, live and multi-turn sections (BFCL's
                       overall accuracy).
A category that was not run is left out of a mean; with `missing_zero` (eval.py
--missing-zero) each of the release's 13 not run counts as accuracy 0 with its item count (under
`limit`, the first `limit`), as evalscope's report (the release's) and BFCL count it.

Known data errors: 6 of the 2,351 Python AST items fail even with their own ground truth
(simple_363, live_simple_106-63-0, live_simple_112-68-0, live_multiple_507-149-4,
live_multiple_862-181-3, live_multiple_964-207-0: name mismatch, empty or extra answers).

Results: each scored item is appended to out_jsonl (lib/runs/evalcli.py's result files: a fingerprint
line, then one line per item); a restart skips the ids already there. `gold_output(item)`
renders BFCL's first possible answer as Hermes text, `gold_turns(item)` a multi-turn
item's ground truth per step (oracles for tests and smoke runs).

    python -m bench bfcl --model runs/slca-s0/final --out out/bfcl.jsonl --limit 2
"""
import ast
import copy
import importlib
import inspect
import json
import sys
import types
from pathlib import Path

from tqdm import tqdm

from lib.runs.evalcli import resume

from lib.runs.files import append_jsonl, read_jsonl
from rewards import predicted_calls
from segment import strip_think

AST_CATEGORIES = ("simple", "multiple", "parallel", "parallel_multiple",
                  "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple")
LANGUAGE_CATEGORIES = ("java", "javascript")
MULTI_TURN_CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param",
                         "multi_turn_long_context")
RELEVANCE_CATEGORIES = ("irrelevance", "live_irrelevance", "live_relevance")
RELEASE_CATEGORIES = AST_CATEGORIES[:4] + LANGUAGE_CATEGORIES + AST_CATEGORIES[4:] + MULTI_TURN_CATEGORIES[:3]
CATEGORIES = AST_CATEGORIES + LANGUAGE_CATEGORIES + MULTI_TURN_CATEGORIES + RELEVANCE_CATEGORIES
LANGUAGES = {"java": "Java", "javascript": "JavaScript"}  # checker language; Python otherwise
HINTS = {"java": " Note that the provided function is in Java 8 SDK syntax.",  # bfcl-eval's pre-processing
         "javascript": " Note that the provided function is in JavaScript syntax."}
PYTHON_HINT = " Note that the provided function is in Python 3 syntax."
MODEL_NAME = "slca-grpo-hermes"  # key of the stand-in model config (no "_" in it)
MAX_BRACKETS = 12  # see the module docstring; 2^12 backtracking steps at worst
BLOCKED = ("kill", "exit", "quit", "remove", "unlink", "popen", "Popen", "run")  # bfcl-eval refuses these names
LIMITS = {"exponent": 1000, "precision": 1000}  # MathAPI.power / logarithm / square_root arguments


def checker():
    """bfcl-eval's ast_checker module, imported without its SDK-importing model_config; its
    multi_turn_checker gets the eval()-free executor (module docstring)."""
    name = "bfcl_eval.constants.model_config"
    entry = types.SimpleNamespace(underscore_to_dot=True, display_name=MODEL_NAME)
    if name not in sys.modules:
        stub = types.ModuleType(name)
        stub.__doc__ = "Stand-in for bfcl-eval's model_config (which imports every API SDK)."
        stub.MODEL_CONFIG_MAPPING = {}
        sys.modules[name] = stub
    sys.modules[name].MODEL_CONFIG_MAPPING.setdefault(MODEL_NAME, entry)
    from bfcl_eval.eval_checker.ast_eval import ast_checker
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_checker

    multi_turn_checker.execute_multi_turn_func_call = _checker_execute
    return ast_checker


def data_dir():
    import bfcl_eval  # not bfcl_eval.constants.eval_config: importing it creates folders

    return Path(bfcl_eval.__file__).parent / "data"


def is_multi_turn(category):
    return category.startswith("multi_turn")


def load(category, limit=None):
    """The first `limit` items of a category.

    Single-turn: {id, category, messages, functions, ground_truth (None for relevance)}.
    Multi-turn: {id, category, turns (a list of message lists), functions (the docs offered
    from the start), missed ({turn: docs offered from that turn on}), initial_config,
    involved_classes, ground_truth (per turn, calls as Python source)}."""
    path = data_dir() / f"BFCL_v3_{category}.json"
    if category not in CATEGORIES or not path.exists():
        raise ValueError(f"unknown BFCL category {category!r}")
    answers = {}
    if category not in RELEVANCE_CATEGORIES:
        answers = {r["id"]: r["ground_truth"] for r in read_jsonl(data_dir() / "possible_answer" / path.name)}
    rows = read_jsonl(path)[:limit]
    if not is_multi_turn(category):
        return [{"id": r["id"], "category": category, "messages": r["question"][0], "functions": r["function"],
                 "ground_truth": answers.get(r["id"])} for r in rows]
    from bfcl_eval.constants.category_mapping import MULTI_TURN_FUNC_DOC_FILE_MAPPING

    docs_dir = data_dir() / "multi_turn_func_doc"
    items = []
    for r in rows:  # as bfcl_eval._llm_response_generation.process_multi_turn_test_case
        functions = [d for c in r["involved_classes"]
                     for d in read_jsonl(docs_dir / MULTI_TURN_FUNC_DOC_FILE_MAPPING[c])]
        missed = {}
        for turn, names in r.get("missed_function", {}).items():
            missed[turn] = [d for d in functions if d["name"] in names]
            functions = [d for d in functions if d["name"] not in names]
        items.append({"id": r["id"], "category": category, "turns": r["question"], "functions": functions,
                      "missed": missed, "initial_config": r["initial_config"],
                      "involved_classes": r["involved_classes"], "ground_truth": answers[r["id"]]})
    return items


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


def _as_source(properties, category):
    """java / javascript: each parameter becomes a string of source code, its own type named in
    the description (bfcl-eval's func_doc_language_specific_pre_processing, same words)."""
    language, lists = {"java": ("Java", ("ArrayList", "Array")), "javascript": ("JavaScript", ("array",))}[category]
    for value in properties.values():
        if value["type"] == "any":
            value["description"] += f" This parameter can be of any type of {language} object in string representation."
        else:
            value["description"] += f" This is {language} {value['type']} type parameter in string representation."
        if value["type"] in lists:
            value["description"] += (f" The list elements are of type {value['items']['type']}; "
                                     "they are not in string representation.")
            del value["items"]
        if category == "javascript" and value["type"] == "dict" and "properties" in value:
            value["description"] += (" The dictionary entries have the following schema; they are not in string "
                                     f"representation. {json.dumps(value['properties'])}")
            del value["properties"]
        value["type"] = "string"


def openai_tools(functions, category="simple"):
    """BFCL function docs -> OpenAI tool list, as bfcl-eval prepares them for OSS FC models."""
    from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI  # dict -> object, float -> number, ...

    out = []
    for fn in copy.deepcopy(functions):
        fn["description"] = fn["description"] + HINTS.get(category, PYTHON_HINT)
        if category in LANGUAGES:
            _as_source(fn["parameters"]["properties"], category)
        fn["name"] = fn["name"].replace(".", "_")
        params = fn["parameters"]
        params["type"] = "object"
        params["properties"] = _cast_to_openai_type(params["properties"], GORILLA_TO_OPENAPI)
        out.append({"type": "function", "function": fn})
    return out


def to_chat(item):
    """A single-turn item -> (chat messages, OpenAI tool list) for the generate callable."""
    return copy.deepcopy(item["messages"]), openai_tools(item["functions"], item["category"])


def decode(text):
    """Hermes output -> BFCL's decoded form [{name: {arg: value}}]; [] when no valid call."""
    blocks, found = predicted_calls(text)
    if len(blocks) < found:  # a malformed or unclosed block voids the output
        return []
    return [{c.name: c.arguments} for b in blocks for c in b]


def _too_nested(decoded):
    return any(str(v).count("[") > MAX_BRACKETS or str(v).count("{") > MAX_BRACKETS
               for call in decoded for args in call.values() for v in args.values())


def score(item, text):
    """Score one single-turn output with bfcl-eval's checker -> {valid, error_type, error, decoded}."""
    decoded = decode(text)
    category = item["category"]
    if category in RELEVANCE_CATEGORIES:
        wants_call = category == "live_relevance"
        valid = (len(decoded) > 0) == wants_call
        error_type = None if valid else f"{category}_error:{'no_call' if wants_call else 'has_call'}"
        return {"valid": valid, "error_type": error_type, "error": None, "decoded": decoded}
    if category in LANGUAGES and _too_nested(decoded):
        return {"valid": False, "error_type": "value_too_nested", "error": None, "decoded": decoded}
    try:
        res = checker().ast_checker(item["functions"], decoded, item["ground_truth"],
                                    LANGUAGES.get(category, "Python"), category, MODEL_NAME)
    except Exception as e:  # the checker can trip over odd values; that is a miss
        res = {"valid": False, "error_type": "checker_exception", "error": [repr(e)]}
    if res["valid"]:
        return {"valid": True, "error_type": None, "error": None, "decoded": decoded}
    return {"valid": False, "error_type": res.get("error_type"),
            "error": json.dumps(res.get("error"), default=str)[:500], "decoded": decoded}


# ---------------------------------------------------------------------------------------------
# multi-turn
def backends(involved_classes, initial_config, long_context=False):
    """Fresh instances of the backend classes, each loaded with its initial state: {class: instance}."""
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import CLASS_FILE_PATH_MAPPING, STATELESS_CLASSES

    out = {}
    for name in involved_classes:
        instance = getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[name]), name)()
        if name not in STATELESS_CLASSES:
            instance._load_scenario(copy.deepcopy(initial_config.get(name, {})), long_context=long_context)
        out[name] = instance
    return out


def execute(instances, name, arguments, positional=()):
    """Run one call on the backends -> its result as text, as bfcl-eval writes it: a str as is,
    a dict as JSON, anything else str(); a failure is "Error during execution: <reason>".
    Any public method of the instances is callable (a later class wins a shared name)."""
    methods = {m: f for instance in instances.values()
               for m, f in inspect.getmembers(instance, inspect.ismethod) if not m.startswith("_")}
    try:
        if name in BLOCKED:
            raise ValueError(f"Function call {name} is not allowed.")
        if name not in methods:
            raise NameError(f"name '{name}' is not defined")
        for key, limit in LIMITS.items():
            value = arguments.get(key)
            if isinstance(value, (int, float)) and abs(value) > limit:
                raise ValueError(f"{key}={value} is over this harness's limit of {limit}")
        result = methods[name](*positional, **arguments)
    except Exception as e:  # the backends raise on bad arguments; the model sees the reason
        return f"Error during execution: {e}"
    if isinstance(result, str):
        return result
    if isinstance(result, dict):
        try:
            return json.dumps(result)
        except (TypeError, ValueError):
            return str(result)
    return str(result)


def call_source(name, arguments):
    """A decoded call as bfcl-eval writes it for its checker: name(key=repr(value),...)."""
    return f"{name}({','.join(f'{k}={v!r}' for k, v in arguments.items())})"


def parse_source(text):
    """`name(arg, key=value, ...)` with literal values -> (name, positional, keywords), read
    with ast.literal_eval (nothing runs). Raises ValueError."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)) or \
                any(k.arg is None for k in node.keywords):
            raise ValueError("not a call of a plain name with literal arguments")
        return (node.func.id, [ast.literal_eval(a) for a in node.args],
                {k.arg: ast.literal_eval(k.value) for k in node.keywords})
    except (SyntaxError, RecursionError, MemoryError, TypeError) as e:
        raise ValueError(f"cannot read the call: {type(e).__name__}") from None


_STATES = {}  # (model name, item id) -> backend instances, for one multi_turn_checker run


def _checker_execute(func_call_list, initial_config, involved_classes, model_name, test_entry_id,
                     *, long_context=False, is_evaL_run=False):
    """bfcl-eval's execute_multi_turn_func_call, same arguments and results, without eval()."""
    key = (model_name, test_entry_id)
    if key not in _STATES:
        _STATES[key] = backends(involved_classes, initial_config, long_context)
    results = []
    for text in func_call_list:
        try:
            name, positional, keywords = parse_source(text)
        except ValueError as e:
            results.append(f"Error during execution: {e}")
            continue
        results.append(execute(_STATES[key], name, keywords, positional))
    return results, _STATES[key]


def score_multi_turn(item, outputs):
    """Score a multi-turn item from its replies (per turn, per step) -> {valid, error_type, error, decoded}."""
    decoded = [[[call_source(n, a) for call in decode(text) for n, a in call.items()] for text in turn]
               for turn in outputs]
    decoded = [[step for step in turn if step] for turn in decoded]  # as bfcl-eval's multi_turn_runner
    if len(outputs) != len(item["ground_truth"]):
        return {"valid": False, "error_type": "multi_turn:force_terminated", "error": None, "decoded": decoded}
    checker()
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    entry = {"id": item["id"], "initial_config": item["initial_config"], "involved_classes": item["involved_classes"]}
    _STATES.clear()
    try:
        res = multi_turn_checker(decoded, item["ground_truth"], entry, item["category"], MODEL_NAME)
    except Exception as e:  # its asserts, or a backend tripping over a value
        res = {"valid": False, "error_type": "checker_exception", "error_message": repr(e)}
    finally:
        _STATES.clear()
    if res["valid"]:
        return {"valid": True, "error_type": None, "error": None, "decoded": decoded}
    return {"valid": False, "error_type": res.get("error_type"), "error": str(res.get("error_message"))[:500],
            "decoded": decoded}


def _next_turn(ep):
    """Open the episode's next turn, or mark it done after the last one."""
    from bfcl_eval.constants.default_prompts import DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC

    item = ep["item"]
    ep["turn"] += 1
    ep["step"] = 0
    if ep["turn"] == len(item["turns"]):
        ep["done"] = True
        return
    messages = item["turns"][ep["turn"]]
    if str(ep["turn"]) in item["missed"]:  # the held-out functions arrive, with a fixed user line
        ep["functions"] += item["missed"][str(ep["turn"])]
        messages = [{"role": "user", "content": DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC}]
    ep["messages"] += copy.deepcopy(messages)
    ep["tools"] = openai_tools(ep["functions"], item["category"])
    ep["outputs"].append([])


def _start(item):
    ep = {"item": item, "functions": list(item["functions"]), "messages": [], "turn": -1, "outputs": [],
          "done": False, "instances": backends(item["involved_classes"], item["initial_config"],
                                               "long_context" in item["category"])}
    _next_turn(ep)
    return ep


def _reply(ep, text):
    """Take one reply: run its calls and go on, or end the turn when it makes none."""
    from bfcl_eval.constants.default_prompts import MAXIMUM_STEP_LIMIT

    ep["outputs"][-1].append(text)
    calls = [(n, a) for call in decode(text) for n, a in call.items()]
    if not calls:
        ep["messages"].append({"role": "assistant", "content": strip_think(text).strip()})
        _next_turn(ep)
        return
    ep["messages"].append({"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": n, "arguments": a}} for n, a in calls]})
    ep["messages"] += [{"role": "tool", "content": execute(ep["instances"], n, a)} for n, a in calls]
    ep["step"] += 1
    if ep["step"] > MAXIMUM_STEP_LIMIT:  # force-terminated
        ep["done"] = True


def play(generate, items, batch_size=8, on_done=None):
    """Run multi-turn items through `generate`, up to `batch_size` episodes per call; a finished
    episode frees its slot. on_done(item, outputs) as each finishes; returns {id: outputs}."""
    queue, live, out = list(items), [], {}
    while queue or live:
        while queue and len(live) < batch_size:
            live.append(_start(queue.pop(0)))
        texts = generate([copy.deepcopy(ep["messages"]) for ep in live], [ep["tools"] for ep in live])
        if len(texts) != len(live):
            raise ValueError(f"generate returned {len(texts)} texts for {len(live)} prompts")
        for ep, text in zip(live, texts):
            _reply(ep, text)
        for ep in live:
            if ep["done"]:
                out[ep["item"]["id"]] = ep["outputs"]
                if on_done:
                    on_done(ep["item"], ep["outputs"])
        live = [ep for ep in live if not ep["done"]]
    return out


# ---------------------------------------------------------------------------------------------
def gold_output(item, as_list=False):
    """BFCL's first possible answer of a single-turn item rendered as Hermes text (an oracle).

    Optional parameters ("" among the options, not required) are left out. as_list=True puts
    all calls in one <tool_call> block as a JSON list (the Toucan format); else one block
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


def gold_turns(item):
    """A multi-turn item's ground truth as replies: per turn, one reply per gold call (in
    order) and a closing reply without a call."""
    docs = {d["name"]: list(d["parameters"]["properties"]) for d in
            item["functions"] + [d for ds in item["missed"].values() for d in ds]}
    turns = []
    for calls in item["ground_truth"]:
        steps = []
        for text in calls:
            name, positional, keywords = parse_source(text)
            keywords = {**dict(zip(docs[name], positional)), **keywords}  # positional -> named, doc order
            steps.append("<tool_call>\n" + json.dumps({"name": name, "arguments": keywords}) + "\n</tool_call>")
        turns.append(steps + ["Done."])
    return turns


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def accuracy(records, zero=None):
    """Per-category accuracy and BFCL's summary numbers (see the module docstring). `zero`:
    {category: item count} of categories not run that count as accuracy 0 over that many items."""
    per = {}
    for r in records:
        c = per.setdefault(r["category"], {"correct": 0, "total": 0})
        c["total"] += 1
        c["correct"] += int(bool(r["valid"]))
    for c in per.values():
        c["accuracy"] = c["correct"] / c["total"]
    for cat, n in (zero or {}).items():
        per.setdefault(cat, {"correct": 0, "total": n, "accuracy": 0.0, "not_run": True})

    def acc(cat):
        return per[cat]["accuracy"] if cat in per else None

    def weighted(cats):
        n = sum(per[c]["total"] for c in cats if c in per)
        return sum(per[c]["correct"] for c in cats if c in per) / n if n else None

    simple = _mean(acc(c) for c in ("simple",) + LANGUAGE_CATEGORIES)
    non_live = [simple] + [acc(c) for c in AST_CATEGORIES[1:4]]
    live = AST_CATEGORIES[4:]
    out = {"per_category": per, "simple_ast": simple, "non_live_ast": _mean(non_live), "live_ast": weighted(live)}
    out["overall_ast"] = _mean([out["non_live_ast"], out["live_ast"]])
    if "irrelevance" in per:
        out["non_live_overall"] = _mean(non_live + [acc("irrelevance")])
    if "live_irrelevance" in per or "live_relevance" in per:
        out["live_overall"] = weighted(live + ("live_irrelevance", "live_relevance"))
    out["multi_turn"] = _mean([acc(MULTI_TURN_CATEGORIES[0]), weighted(MULTI_TURN_CATEGORIES[1:])])
    out["overall"] = _mean([out.get("non_live_overall", out["non_live_ast"]),
                            out.get("live_overall", out["live_ast"]), out["multi_turn"]])
    return out


def run_bfcl(generate, *, categories=RELEASE_CATEGORIES, limit=None, batch_size=8, out_jsonl=None, fingerprint=None,
             missing_zero=False):
    """Generate, score and aggregate the first `limit` items of each category, `batch_size`
    prompts per generate call. Resumes from out_jsonl (made under `fingerprint`, lib.runs.evalcli.resume).
    Returns accuracy(...); with `missing_zero`, each of RELEASE_CATEGORIES not in
    `categories` counts as 0 (module docstring)."""
    items = [it for c in categories for it in load(c, limit)]
    wanted = {it["id"] for it in items}
    done = {r["id"]: r for r in resume(out_jsonl, fingerprint) if r.get("id") in wanted}
    single = [it for it in items if it["id"] not in done and not is_multi_turn(it["category"])]
    multi = [it for it in items if it["id"] not in done and is_multi_turn(it["category"])]
    records = list(done.values())
    with tqdm(total=len(items), initial=len(done), desc="BFCL", dynamic_ncols=True) as bar:
        def keep(rows):
            append_jsonl(out_jsonl, rows)
            records.extend(rows)
            bar.update(len(rows))

        for start in range(0, len(single), batch_size):
            batch = single[start:start + batch_size]
            chats = [to_chat(it) for it in batch]
            texts = generate([m for m, _ in chats], [t for _, t in chats])
            if len(texts) != len(batch):
                raise ValueError(f"generate returned {len(texts)} texts for {len(batch)} prompts")
            keep([{"id": it["id"], "category": it["category"], "output": text, **score(it, text)}
                  for it, text in zip(batch, texts)])
        play(generate, multi, batch_size, lambda it, outputs: keep(
            [{"id": it["id"], "category": it["category"], "output": outputs, **score_multi_turn(it, outputs)}]))
    zero = {c: len(load(c, limit)) for c in RELEASE_CATEGORIES if c not in categories} if missing_zero else None
    return accuracy(records, zero)
