"""bench/bfcl.py and bench/tau2.py: BFCL V3 and tau2-bench adapters (CPU; skipped when the extra is missing).

Install the extra with:
    pip install -r requirements-bench.txt && pip install --no-deps -r requirements-bench-nodeps.txt
"""
import copy
import json
import sys
import threading
import time
from unittest import mock

import pytest

from bench import bfcl as BF
from bench import tau2 as T2
from segment import find_blocks

INSTALL = ("benchmark extra not installed: pip install -r requirements-bench.txt && "
           "pip install --no-deps -r requirements-bench-nodeps.txt")


def extra(load):
    """What `load` returns, or a skip naming the install command."""
    try:
        return load()
    except ImportError as e:
        pytest.skip(f"{INSTALL} ({e})")


@pytest.fixture(scope="module")
def bfcl():
    return extra(BF.checker)


@pytest.fixture(scope="module")
def tau2():
    return extra(T2.import_tau2)


# --------------------------------------------------------------------------------------------
# Hermes parsing (no extra needed)
# --------------------------------------------------------------------------------------------


def test_decode_formats():
    one = '<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>'
    two = one + '\n<tool_call>{"name": "g", "arguments": {}}</tool_call>'
    lst = '<tool_call>[{"name": "f", "arguments": {"x": 1}}, {"name": "g", "parameters": {"y": "a"}}]</tool_call>'
    assert BF.decode(one) == [{"f": {"x": 1}}]
    assert BF.decode(two) == [{"f": {"x": 1}}, {"g": {}}]
    assert BF.decode(lst) == [{"f": {"x": 1}}, {"g": {"y": "a"}}]
    assert BF.decode("<think>maybe <tool_call>{\"name\": \"h\"}</tool_call></think>" + one) == [{"f": {"x": 1}}]
    assert BF.decode('<tool_call>{"name": "f", "arguments": {"x": 1}}') == []  # unclosed: format part < 1
    assert BF.decode("no call here") == []
    # one malformed block voids the output, as in bfcl-eval's Qwen FC handler
    assert BF.decode(one + "<tool_call>{not json}</tool_call>") == []
    assert BF.decode('<tool_call>{"name": "f", "arguments": "{\\"x\\": 1}"}</tool_call>') == []
    assert BF.decode('<tool_call>{"arguments": {}}</tool_call>') == []


def test_hermes_to_reply():
    r = T2.parse_reply('<think>hm</think>Let me check.\n<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>')
    assert r == {"content": "Let me check.", "tool_calls": [{"name": "f", "arguments": {"a": 1}}]}
    assert T2.parse_reply("Hello") == {"content": "Hello", "tool_calls": []}
    bad = "<tool_call>{oops</tool_call>"
    assert T2.parse_reply(bad) == {"content": bad, "tool_calls": []}


def test_summarize_bfcl_weighting():
    def rec(cat, ok):
        return {"category": cat, "valid": ok}
    rows = ([rec("simple", True)] + [rec("multiple", False)] * 3
            + [rec("live_simple", True)] + [rec("live_multiple", False)] * 3
            + [rec("irrelevance", True)])
    s = BF.accuracy(rows)
    assert s["per_category"]["multiple"] == {"correct": 0, "total": 3, "accuracy": 0.0}
    assert s["non_live_ast"] == pytest.approx(0.5)     # unweighted: (1 + 0) / 2
    assert s["live_ast"] == pytest.approx(0.25)        # weighted: 1 / 4
    assert s["overall_ast"] == pytest.approx(0.375)
    assert s["non_live_overall"] == pytest.approx(2 / 3)  # (1 + 0 + 1) / 3
    assert "live_overall" not in s


# --------------------------------------------------------------------------------------------
# BFCL
# --------------------------------------------------------------------------------------------


def _oracle(items, render=BF.gold_output):
    """A generate() that answers each prompt with its item's ground truth."""
    table = {}
    for it in items:
        msgs, tools = BF.to_chat(it)
        key = json.dumps([msgs, tools], sort_keys=True)
        assert table.setdefault(key, render(it)) == render(it), "two items share a prompt"
    calls = []

    def generate(batch_msgs, batch_tools):
        calls.append(len(batch_msgs))
        return [table[json.dumps([m, t], sort_keys=True)] for m, t in zip(batch_msgs, batch_tools)]

    generate.calls = calls
    return generate


def test_bfcl_gold_scores_100(bfcl, tmp_path):
    items = [it for c in BF.AST_CATEGORIES for it in BF.load(c, limit=5)]
    assert len(items) == 40
    out = tmp_path / "bfcl.jsonl"
    summary = BF.run_bfcl(_oracle(items), categories=BF.AST_CATEGORIES, limit=5, batch_size=7, out_jsonl=out)
    for c in BF.AST_CATEGORIES:
        assert summary["per_category"][c] == {"correct": 5, "total": 5, "accuracy": 1.0}, c
    assert summary["non_live_ast"] == summary["live_ast"] == summary["overall_ast"] == 1.0
    head, *rows = [json.loads(line) for line in open(out)]
    assert head == {"fingerprint": {}} and len(rows) == 40 and all(r["valid"] for r in rows)
    # the SLCA eval format (all calls as one JSON list in one block) scores the same
    assert all(BF.score(it, BF.gold_output(it, as_list=True))["valid"] for it in items)


def _corrupt_value(item):
    """Gold text with the first argument of the first call set to a value BFCL does not accept."""
    calls = [json.loads(b) for b in find_blocks(BF.gold_output(item))]
    args = calls[0]["arguments"]
    for k, v in args.items():
        if isinstance(v, bool):
            continue
        if isinstance(v, (int, float)):
            args[k] = v + 987654
        elif isinstance(v, str):
            args[k] = v + " zzz wrong"
        elif isinstance(v, list):
            args[k] = v + ["zzz wrong"]
        else:
            continue
        return "\n".join("<tool_call>" + json.dumps(c) + "</tool_call>" for c in calls)
    return None


def test_bfcl_corrupted_scores_lower(bfcl):
    for c in BF.AST_CATEGORIES:
        items = BF.load(c, limit=5)
        gold = sum(BF.score(it, BF.gold_output(it))["valid"] for it in items)
        renamed = [BF.gold_output(it).replace('"name": "', '"name": "zz_', 1) for it in items]
        assert gold == 5
        assert sum(BF.score(it, t)["valid"] for it, t in zip(items, renamed)) == 0, c
        bad_values = [(it, _corrupt_value(it)) for it in items]
        bad_values = [(it, t) for it, t in bad_values if t is not None]
        assert bad_values, c
        assert not any(BF.score(it, t)["valid"] for it, t in bad_values), c
        # a missing call and a plain-text answer fail too
        assert not BF.score(items[0], "I don't know.")["valid"]
    parallel = BF.load("parallel", limit=1)[0]
    first_only = BF.gold_output(parallel).split("\n</tool_call>")[0] + "\n</tool_call>"
    assert BF.score(parallel, first_only)["error_type"].endswith("wrong_count")


def test_bfcl_irrelevance(bfcl):
    item = BF.load("irrelevance", limit=1)[0]
    assert item["ground_truth"] is None
    name = BF.openai_tools(item["functions"])[0]["function"]["name"]
    assert BF.score(item, "I cannot answer that with these tools.")["valid"]
    assert not BF.score(item, f'<tool_call>{{"name": "{name}", "arguments": {{}}}}</tool_call>')["valid"]
    assert BF.accuracy([{"category": "irrelevance", "valid": True}])["non_live_overall"] == 1.0


def test_bfcl_tools_match_bfcl_convert_to_tool(bfcl):
    """Our tool conversion equals bfcl-eval's own (pre-processing + convert_to_tool, OSS style)
    on every single-turn item. Its module needs tree-sitter and tenacity: stub them for the import."""
    before = set(sys.modules)
    stubs = ["tree_sitter", "tree_sitter_java", "tree_sitter_javascript", "tenacity"]
    with mock.patch.dict(sys.modules, {m: sys.modules.get(m, mock.MagicMock()) for m in stubs}):
        from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI
        from bfcl_eval.model_handler.model_style import ModelStyle
        from bfcl_eval.model_handler.utils import convert_to_tool, func_doc_language_specific_pre_processing
    for name in set(sys.modules) - before:  # leave no module imported against the stubs
        if name.startswith("bfcl_eval.model_handler"):
            del sys.modules[name]
    n = 0
    for c in BF.CATEGORIES:
        for it in BF.load(c, limit=20 if BF.is_multi_turn(c) else None):
            docs = it["functions"] + [d for ds in it.get("missed", {}).values() for d in ds]
            ref = convert_to_tool(func_doc_language_specific_pre_processing(copy.deepcopy(docs), c),
                                  GORILLA_TO_OPENAPI, ModelStyle.OSSMODEL)
            assert [t["function"] for t in BF.openai_tools(docs, c)] == ref, it["id"]
            n += 1
    assert n > 3200
    tool = BF.openai_tools(BF.load("simple", limit=2)[1]["functions"])[0]
    assert tool["type"] == "function" and tool["function"]["name"] == "math_factorial"
    assert tool["function"]["parameters"]["type"] == "object"


def test_run_bfcl_resumes(bfcl, tmp_path):
    out = tmp_path / "r.jsonl"
    cats = ("simple", "live_parallel")
    items = [it for c in cats for it in BF.load(c, limit=4)]
    gen = _oracle(items)
    BF.run_bfcl(gen, categories=cats, limit=3, batch_size=2, out_jsonl=out)
    assert sum(gen.calls) == 6
    s = BF.run_bfcl(gen, categories=cats, limit=3, batch_size=2, out_jsonl=out)
    assert sum(gen.calls) == 6 and s["per_category"]["simple"]["total"] == 3
    s = BF.run_bfcl(gen, categories=cats, limit=4, batch_size=2, out_jsonl=out)
    assert sum(gen.calls) == 8 and s["per_category"]["live_parallel"]["total"] == 4
    assert len(open(out).readlines()) == 1 + 8  # the fingerprint line, then the items
    with pytest.raises(ValueError):
        BF.run_bfcl(lambda m, t: [], categories=("multiple",), limit=1, out_jsonl=None)
    s = BF.run_bfcl(gen, categories=cats, limit=3, batch_size=2, out_jsonl=out, missing_zero=True)
    assert sorted(s["per_category"]) == sorted(set(BF.RELEASE_CATEGORIES) | set(cats))   # the release's 13 and ours
    assert s["per_category"]["java"]["total"] == 3 and s["simple_ast"] == pytest.approx(1 / 3)


def test_bfcl_java_and_javascript_answers_are_source_strings(bfcl):
    """Java/JavaScript arguments are strings of source code, checked in that language."""
    java = BF.load("java", limit=1)[0]
    assert BF.score(java, BF.gold_output(java))["valid"]  # 'mapController', 'mapArea': any-typed
    js = BF.load("javascript", limit=1)[0]
    call = ('<tool_call>{"name": "validateUserInput", "arguments": '
            '{"inputField": "userInputField", "isComplete": %s}}</tool_call>')
    assert BF.score(js, call % '"true"')["valid"]
    assert BF.score(js, call % "true")["error_type"] == "type_error:js"        # a JSON bool is not JS source
    assert not BF.score(js, call % '"false"')["valid"]
    tool = BF.openai_tools(js["functions"], "javascript")[0]["function"]
    assert tool["description"].endswith(" Note that the provided function is in JavaScript syntax.")
    assert {p["type"] for p in tool["parameters"]["properties"].values()} == {"string"}
    nested = call % ('"' + "[" * (BF.MAX_BRACKETS + 1) + '"')
    assert BF.score(js, nested)["error_type"] == "value_too_nested"  # never reaches bfcl-eval's regex parser


def test_bfcl_summary_formulas():
    rec = lambda cat, ok: {"category": cat, "valid": ok}  # noqa: E731
    rows = ([rec("simple", True), rec("java", False), rec("javascript", True), rec("multiple", True)]
            + [rec("live_simple", True)] + [rec("live_multiple", False)] * 3
            + [rec("multi_turn_base", True), rec("multi_turn_miss_func", False), rec("multi_turn_miss_func", True)])
    s = BF.accuracy(rows)
    assert s["simple_ast"] == pytest.approx(2 / 3)                 # (1 + 0 + 1) / 3
    assert s["non_live_ast"] == pytest.approx((2 / 3 + 1) / 2)     # categories not run are left out
    assert s["live_ast"] == pytest.approx(0.25)
    assert s["multi_turn"] == pytest.approx(0.75)                  # (1 + 0.5) / 2
    assert s["overall"] == pytest.approx(((2 / 3 + 1) / 2 + 0.25 + 0.75) / 3)
    assert BF.accuracy([rec("multi_turn_base", True)])["overall"] == 1.0


def test_bfcl_missing_zero_counts_categories_not_run_as_zero():
    rec = lambda cat, ok: {"category": cat, "valid": ok}  # noqa: E731
    rows = [rec("simple", True), rec("multiple", True), rec("live_simple", True), rec("multi_turn_base", True)]
    left_out = BF.accuracy(rows)
    assert left_out["non_live_ast"] == 1.0 and left_out["live_ast"] == 1.0 and left_out["overall"] == 1.0
    zero = BF.accuracy(rows, {"java": 1, "javascript": 1, "parallel": 1, "parallel_multiple": 1,
                               "live_multiple": 3, "multi_turn_miss_func": 1})
    assert zero["simple_ast"] == pytest.approx(1 / 3)                       # simple 1, java 0, javascript 0
    assert zero["non_live_ast"] == pytest.approx((1 / 3 + 1 + 0 + 0) / 4)
    assert zero["live_ast"] == pytest.approx(1 / 4)                          # weighted: 1 of 1 + 3 items
    assert zero["multi_turn"] == pytest.approx(0.5)
    assert zero["per_category"]["java"] == {"correct": 0, "total": 1, "accuracy": 0.0, "not_run": True}


def test_bfcl_multi_turn_is_weighted_as_evalscope():
    """evalscope (the release's BFCL runner): mean of base and the item-weighted mean of the
    augmented categories, so base 1/2, miss_func and miss_param 1/4 each at equal counts."""
    rec = lambda cat, ok: {"category": cat, "valid": ok}  # noqa: E731
    rows = [rec("multi_turn_base", True), rec("multi_turn_miss_func", False), rec("multi_turn_miss_param", False)]
    assert BF.accuracy(rows)["multi_turn"] == pytest.approx(0.5)   # unweighted over three: 1/3
    rows += [rec("multi_turn_miss_func", True)] * 2                 # miss_func 2/3 of 3 items, miss_param 0 of 1
    assert BF.accuracy(rows)["multi_turn"] == pytest.approx((1 + 2 / 4) / 2)


def test_execute_runs_backend_methods_without_eval(bfcl):
    item = BF.load("multi_turn_base", limit=1)[0]
    fs = BF.backends(item["involved_classes"], item["initial_config"])
    assert "GorillaFileSystem" in fs
    assert BF.execute(fs, "pwd", {}) == json.dumps(fs["GorillaFileSystem"].pwd())
    assert BF.execute(fs, "cd", {"folder": "document"}) == '{"current_working_directory": "document"}'
    assert BF.execute(fs, "__import__", {"name": "os"}) == "Error during execution: name '__import__' is not defined"
    assert BF.execute(fs, "run", {}) == "Error during execution: Function call run is not allowed."
    assert BF.execute(fs, "cd", {"nope": 1}).startswith("Error during execution: ")
    math = BF.backends(["MathAPI"], {})
    assert BF.execute(math, "power", {"base": 2, "exponent": 10}) == '{"result": 1024}'
    assert "limit of 1000" in BF.execute(math, "power", {"base": 10, "exponent": 10 ** 9})
    assert BF.parse_source("sort('a.pdf', lines=3)") == ("sort", ["a.pdf"], {"lines": 3})
    for bad in ("f(x=__import__('os'))", "os.system('ls')", "f(**{'a': 1})", "f(", "[1]"):
        with pytest.raises(ValueError):
            BF.parse_source(bad)


def _replay(items, turns_of=BF.gold_turns):
    """A generate() that answers every episode with its item's scripted replies, in order; it
    finds the item by its first user message and the step by the assistant turns so far."""
    script = {it["turns"][0][0]["content"]: [r for t in turns_of(it) for r in t] for it in items}
    assert len(script) == len(items)
    seen = []

    def generate(batch, tools):
        seen.append((copy.deepcopy(batch), tools))
        return [script[next(m["content"] for m in msgs if m["role"] == "user")]
                [sum(m["role"] == "assistant" for m in msgs)] for msgs in batch]
    generate.seen = seen
    return generate


@pytest.mark.parametrize("category", BF.MULTI_TURN_CATEGORIES[:3])
def test_multi_turn_gold_replay_scores_100_and_corruptions_fail(bfcl, category, tmp_path):
    items = BF.load(category, limit=4)
    out = tmp_path / "mt.jsonl"
    s = BF.run_bfcl(_replay(items), categories=(category,), limit=4, batch_size=3, out_jsonl=out)
    assert s["per_category"][category] == {"correct": 4, "total": 4, "accuracy": 1.0}
    rows = [json.loads(line) for line in open(out)][1:]
    assert all(r["valid"] and len(r["output"]) == len(r["decoded"]) for r in rows)
    item = next(it for it in items if len(it["ground_truth"][0]) >= 2)
    gold = BF.gold_turns(item)
    assert BF.score_multi_turn(item, gold)["valid"]
    dropped = [gold[0][1:]] + gold[1:]                             # the first call of turn 0 left out
    assert not BF.score_multi_turn(item, dropped)["valid"]
    assert BF.score_multi_turn(item, gold[:-1])["error_type"] == "multi_turn:force_terminated"
    nothing = [["I will not."] for _ in gold]
    assert BF.score_multi_turn(item, nothing)["error_type"] == "multi_turn:empty_turn_model_response"


def test_miss_func_offers_the_held_out_function_at_its_turn(bfcl):
    item = BF.load("multi_turn_miss_func", limit=1)[0]
    (turn, docs), = item["missed"].items()
    held = docs[0]["name"]
    gen = _replay([item])
    BF.play(gen, [item])
    names = [{t["function"]["name"] for t in tools[0]} for _, tools in gen.seen]
    users = [[m["content"] for m in batch[0] if m["role"] == "user"] for batch, _ in gen.seen]
    first = next(k for k, u in enumerate(users) if len(u) == int(turn) + 1)  # the first step of that turn
    assert all(held not in n for n in names[:first]) and all(held in n for n in names[first:])
    assert users[first][-1] == "I have updated some more functions you can choose from. What about now?"


def test_multi_turn_force_quit_after_the_step_limit(bfcl):
    item = BF.load("multi_turn_base", limit=1)[0]
    calls = lambda batch, tools: ['<tool_call>{"name": "pwd", "arguments": {}}</tool_call>'] * len(batch)  # noqa: E731
    outputs = BF.play(calls, [item])[item["id"]]
    assert len(outputs) == 1 and len(outputs[0]) == 21              # MAXIMUM_STEP_LIMIT = 20, then it quits
    assert BF.score_multi_turn(item, outputs)["error_type"] == "multi_turn:force_terminated"


# --------------------------------------------------------------------------------------------
# tau2-bench
# --------------------------------------------------------------------------------------------

_WRITE_TASKS = {}


def _write_tasks(domain, k):
    """The first k tasks of the base split whose gold actions change a database."""
    if domain not in _WRITE_TASKS:
        found = []
        for t in T2.load_tasks(domain):
            if T2.is_write_task(domain, t):
                found.append(t)
                if len(found) == (3 if domain == "telecom" else 2):
                    break
        _WRITE_TASKS[domain] = found
    return _WRITE_TASKS[domain][:k]


def _recording(fn, log):
    def wrapped(messages, tools):
        log.append((copy.deepcopy(messages), tools))
        return fn(messages, tools)
    return wrapped


# airline's database takes ~0.35 s to load and every run loads it three times
DOMAINS = [pytest.param("airline", marks=pytest.mark.slow), "retail", "telecom"]


@pytest.mark.parametrize("domain", DOMAINS)
def test_tau2_gold_replay_gets_reward_1(tau2, domain):
    tasks = _write_tasks(domain, 3 if domain == "telecom" else 2)
    assert len(tasks) >= 2
    if not any(t.evaluation_criteria.communicate_info for t in tasks) and domain != "telecom":
        # also one task that must communicate information
        tasks.append(next(t for t in T2.load_tasks(domain) if t.evaluation_criteria.communicate_info))
    for task in tasks:
        agent_log, user_log = [], []
        agent_fn, user_fn = T2.gold_replay(task)
        rec = T2.run_task(domain, task, _recording(agent_fn, agent_log), _recording(user_fn, user_log))
        assert rec["reward"] == 1.0 and rec["success"], (task.id, rec["reward_breakdown"])
        assert rec["termination_reason"] == "user_stop"
        msgs, tools = agent_log[-1]
        assert msgs[0]["role"] == "system" and tools and "function" in tools[0]
        if any(a.requestor == "assistant" for a in task.evaluation_criteria.actions):
            assert any(m.get("tool_calls") for m in msgs)  # its own calls come back in the history
        assert all(isinstance(tc["function"]["arguments"], dict)
                   for m in msgs for tc in m.get("tool_calls", []))
        user_calls = [m for m in rec["messages"] if m["role"] == "user" and m.get("tool_calls")]
        if domain == "telecom":  # the device actions were made by the user callable
            assert user_log[-1][1], "telecom user gets its device tools"
            assert len(user_calls) == sum(a.requestor == "user" for a in task.evaluation_criteria.actions) > 0
        else:
            assert user_log[-1][1] == [] and not user_calls
    assert tau2.agent.llm_agent.generate is tau2.utils.llm_utils.generate  # patch undone
    assert tau2.agent.llm_agent.generate.__module__ == "tau2.utils.llm_utils"


@pytest.mark.parametrize("domain", DOMAINS)
def test_tau2_do_nothing_gets_0_on_write_tasks(tau2, domain):
    for task in _write_tasks(domain, 2):
        rec = T2.run_task(domain, task, T2.noop_agent, T2.hangup_user)
        assert rec["reward"] == 0.0 and not rec["success"], task.id
        assert rec["num_agent_tool_calls"] == 0


def test_tau2_read_only_task_is_not_write(tau2):
    task = next(t for t in T2.load_tasks("airline") if not t.evaluation_criteria.actions)
    assert not T2.is_write_task("airline", task)


def test_run_tau2_resumes_and_records_errors(tau2, tmp_path):
    out = tmp_path / "tau2.jsonl"
    picked = T2.load_tasks("telecom", num_tasks=3, seed=1)
    assert [t.id for t in picked] == [t.id for t in T2.load_tasks("telecom", num_tasks=3, seed=1)]
    assert len(picked) == 3
    s = T2.run_tau2("telecom", T2.noop_agent, T2.hangup_user, num_tasks=2, out_jsonl=out)
    assert s["per_domain"]["telecom"]["n"] == 2 and s["overall"] == 0.0

    def must_not_run(messages, tools):
        raise AssertionError("resumed tasks must not run again")

    s = T2.run_tau2("telecom", must_not_run, must_not_run, num_tasks=2, out_jsonl=out)
    assert s["per_domain"]["telecom"]["n"] == 2 and len(open(out).readlines()) == 1 + 2

    def broken(messages, tools):
        raise RuntimeError("endpoint down")

    # a run that raises scores 0, its error kept
    s = T2.run_tau2("telecom", broken, T2.hangup_user, num_tasks=3, out_jsonl=out)
    rows = [json.loads(line) for line in open(out)][1:]
    ids2 = {t.id for t in T2.load_tasks("telecom", num_tasks=2)}
    new = [r for r in rows if r["task_id"] not in ids2]
    assert len(rows) == 2 + len(new) and new and all("error" in r and r["reward"] == 0.0 for r in new)
    assert s["per_domain"]["telecom"] == {"n": 3, "passed": 0, "errors": len(new), "pass^1": 0.0}
    with pytest.raises(RuntimeError):
        T2.run_tau2("telecom", broken, T2.hangup_user, num_tasks=4, out_jsonl=out, raise_errors=True)
    with pytest.raises(SystemExit, match="agent="):  # another model's file is not resumed
        T2.run_tau2("telecom", T2.noop_agent, T2.hangup_user, num_tasks=2, out_jsonl=out,
                    fingerprint={"agent": "other"})


def test_run_tau2_runs_tasks_on_threads(tau2, tmp_path):
    out, threads = tmp_path / "tau2.jsonl", set()

    def slow_noop(messages, tools):
        threads.add(threading.get_ident())
        time.sleep(0.05)  # let the other tasks start meanwhile
        return T2.noop_agent(messages, tools)

    s = T2.run_tau2(["retail", "telecom"], slow_noop, T2.hangup_user, num_tasks=2, out_jsonl=out, batch_size=4)
    assert s["per_domain"]["retail"]["n"] == s["per_domain"]["telecom"]["n"] == 2 and s["overall"] == 0.0
    assert len(open(out).readlines()) == 1 + 4 and len(threads) > 1
    assert tau2.agent.llm_agent.generate is tau2.utils.llm_utils.generate  # patch undone


def test_summarize_tau2_macro_and_micro():
    rows = ([{"domain": "airline", "success": True}] + [{"domain": "retail", "success": False}] * 3)
    s = T2.pass_rates(rows)
    assert s["overall"] == pytest.approx(0.5) and s["overall_micro"] == pytest.approx(0.25)


def test_tau2_gold_replay_through_hermes_text(tau2):
    """The same replay, with every reply written as Hermes text and parsed by hermes_to_reply."""
    def as_text(fn):
        def wrapped(messages, tools):
            reply = fn(messages, tools)
            text = "<think>plan</think>" + (reply.get("content") or "")
            text += "".join(f"\n<tool_call>\n{json.dumps(c)}\n</tool_call>" for c in reply.get("tool_calls", []))
            return T2.parse_reply(text)
        return wrapped

    for domain in ("telecom", "retail"):
        task = _write_tasks(domain, 1)[0]
        agent_fn, user_fn = T2.gold_replay(task)
        rec = T2.run_task(domain, task, as_text(agent_fn), as_text(user_fn))
        assert rec["reward"] == 1.0, (domain, task.id, rec["reward_breakdown"])
        assert not any("think" in (m["content"] or "") for m in rec["messages"])


def test_tau2_empty_replies_are_asked_again_then_become_a_dot(tau2):
    task = _write_tasks("retail", 1)[0]
    calls = []

    def empty(messages, tools):
        calls.append(len(messages))
        return {"content": ""}

    rec = T2.run_task("retail", task, empty, T2.hangup_user, max_steps=4)
    assert "error" not in rec and rec["reward"] == 0.0
    agent_turns = [m for m in rec["messages"] if m["role"] == "assistant"]
    assert agent_turns and all(m["content"] == "." for m in agent_turns[1:])
    assert len(calls) == (1 + T2.EMPTY_RETRIES) * (len(agent_turns) - 1)  # the greeting is tau2's own
