"""SGLS simulator (docs/method.md §5): parsing as the release, the checks and their strings, backends,
truncation, cache, and robustness against hostile text, tasks, schemas and answers."""
import json
import re
import threading
import types
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jsonschema
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lib.frozen.schema
import simulator
from segment import Call
from simulator import FAILED, NO_CALL, NO_RESULT, Simulator, parse_calls, truncate, unwrap
from helpers import cpu, linear

torch.set_num_threads(1)

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather of a city.",
        "parameters": {"type": "object", "required": ["city", "unit"], "properties": {
            "city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}}}}},
    {"type": "function", "function": {
        "name": "book", "description": "Book a flight.",
        "parameters": {"type": "object", "required": ["flight"], "properties": {
            "flight": {"type": "object", "required": ["from"], "properties": {
                "from": {"type": "string"}, "seats": {"type": "integer"}}}}}}},
    {"type": "function", "function": {"name": "now", "description": "The time.", "parameters": {}}},
    {"type": "function", "function": {"name": "hidden", "description": "Not allowed.", "parameters": {}}},
]
WEATHER = {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}, "response": '{"temp": 18}'}


def task(tools=TOOLS, responses=(WEATHER,)):
    return types.SimpleNamespace(tools=list(tools), allowed_tools=["get_weather", "book", "now"],
                                 responses=list(responses))


def turn(*calls):
    """An assistant turn with one block per call (a dict is dumped, a str is the raw body)."""
    return "".join(f"<tool_call>{c if isinstance(c, str) else json.dumps(c)}</tool_call>" for c in calls)


def one(sim, text, t=None):
    [(calls, obs)] = sim.respond([text], [t or task()])
    assert len(calls) == len(obs)
    return obs


class Scripted:
    """A fake client: reply(prompt_text) gives each reply; records every batch."""

    def __init__(self, reply):
        self.reply, self.batches = reply, []

    def complete(self, batch, temperature, max_tokens):
        self.batches.append([m[-1]["content"] for m in batch])
        return [self.reply(m[-1]["content"]) for m in batch]


def request(prompt):
    """The call a simulator prompt asks about: its last line, <tool_call>[{...}]</tool_call>."""
    line = prompt.rsplit("\n", 1)[1]
    assert line.startswith("<tool_call>") and line.endswith("</tool_call>")
    [call] = json.loads(line[len("<tool_call>"):-len("</tool_call>")])
    return call


def echo(prompt):
    """Answers with the arguments of the incoming call."""
    return f"<tool_response>{json.dumps(request(prompt)['parameters'])}</tool_response>"


# ---- parsing: the release's Hermes parser by default -----------------------------------------

def release_calls(text):
    """The release's parser and argument decoding, written out (verl tool_parser.py, HermesToolParser,
    then tool_agent_loop.py's json.loads): [(name, arguments or None when they do not decode)]."""
    if "<tool_call>" not in text or "</tool_call>" not in text:
        return []
    out = []
    for match in re.findall(r"<tool_call>(.*?)</tool_call>", text, re.DOTALL):
        try:
            parsed = json.loads(match)
        except Exception:
            continue
        for obj in parsed if isinstance(parsed, list) else [parsed] if isinstance(parsed, dict) else []:
            if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
                continue
            args = obj.get("arguments") or obj.get("parameters")
            args = {} if args is None else args
            args = args if isinstance(args, str) else json.dumps(args)
            try:
                out.append((obj["name"], json.loads(args)))
            except ValueError:
                out.append((obj["name"], None))
    return out


ITEMS = st.one_of(
    st.fixed_dictionaries({"name": st.sampled_from(["f", "", "get_weather"])},
                          optional={"arguments": st.sampled_from([{}, {"a": 1}, "", "{}", '{"b": 2}', "{bad", None, 0]),
                                    "parameters": st.sampled_from([{"p": 1}, {}, None, "{\"q\": 3}"])}),
    st.sampled_from([{"name": 3}, {"arguments": {}}, 5, "x", None, []]))
BODIES = st.one_of(st.lists(ITEMS, max_size=3).map(json.dumps), ITEMS.map(json.dumps),
                   st.sampled_from(["not json", "", "{", "3", '"s"', "[]", "null", '{"name": "f"} x']))
FRAGMENTS = st.one_of(BODIES.map(lambda b: f"<tool_call>{b}</tool_call>"),
                      st.sampled_from(["<tool_call>", "</tool_call>", "text ", "\n"]))


@settings(max_examples=500, deadline=None, database=None, derandomize=True)
@given(st.lists(FRAGMENTS, max_size=5).map("".join))
def test_end_mode_is_the_release_parser(text):
    calls = parse_calls(text)
    expected = release_calls(text)
    assert [c.name for c in calls] == [n for n, _ in expected]
    for c, (_, args) in zip(calls, expected):
        if isinstance(args, dict):
            assert (c.arguments, c.error) == (args, "")
        elif args is None:  # the arguments did not decode: the release's check-1 observation
            assert c.error.startswith("Invalid tool arguments format - ") and "must be a JSON object" not in c.error
        else:  # JSON but not an object: an error here, passed on to the LLM in the release
            assert c.error.startswith("Invalid tool arguments format - arguments must be a JSON object")


@pytest.mark.parametrize("text, names", [
    (turn("not json at all"), []),
    (turn("3"), []),
    (turn("[]"), []),
    ('<tool_call>{"name": "now", "arguments": {}}', []),                          # never closed
    (turn('[{"name": "now"}, 5, {"arguments": {}}, {"name": 3}]'), ["now"]),       # bad items dropped
    (turn("{bad") + turn({"name": "now"}), ["now"]),                                # bad block dropped
])
def test_end_mode_drops_what_does_not_parse(text, names):
    [(calls, obs)] = Simulator().respond([text], [task()])
    assert [c.name for c in calls] == names and len(obs) == len(names)


def test_end_mode_argument_rules_of_the_release():
    sim = Simulator()
    calls, obs = sim.respond([turn(
        {"name": "book", "arguments": {}, "parameters": {"flight": {"from": "CDG"}}},  # empty arguments fall through
        {"name": "now", "arguments": []},                                              # falsy: {}
        {"name": "now", "arguments": "  "},                                            # a string that is not JSON
        {"name": ""})], [task()])[0]
    assert [c.arguments for c in calls[:2]] == [{"flight": {"from": "CDG"}}, {}]
    assert obs[:2] == [NO_RESULT, NO_RESULT]
    assert obs[2].startswith("Error: Invalid tool arguments format - ")
    assert obs[3] == "Tool '' not found in the current available tools set."


@settings(max_examples=300, deadline=None, database=None, derandomize=True)
@given(st.lists(FRAGMENTS, max_size=5).map("".join))
def test_release_parse_keeps_arguments_that_are_not_an_object(text):
    calls = parse_calls(text, parse="release")
    expected = release_calls(text)
    assert [c.name for c in calls] == [n for n, _ in expected]
    for c, (_, args) in zip(calls, expected):
        assert (c.arguments, c.error) == (args, "") if args is not None else c.error.startswith("Invalid tool")


def test_release_parse_answers_calls_in_think_and_sends_any_arguments_to_the_llm():
    thought = "<think>" + turn({"name": "now"}) + "</think>"
    assert parse_calls(thought) == [] and [c.name for c in parse_calls(thought, parse="release")] == ["now"]
    client = Scripted(echo)
    sim = Simulator("llm", client=client, schema_check="light", parse="release")
    obs = one(sim, turn({"name": "get_weather", "arguments": [1, 2]}) + thought)
    assert obs == ["[1, 2]", "{}"]        # no check-1 error, check 3 skipped (the release's dict-only check)
    assert one(Simulator("llm", client=client, schema_check="light"), turn({"name": "get_weather", "arguments": [1]})) \
        == ["Error: Invalid tool arguments format - arguments must be a JSON object, got list"]


def test_answer_mode_keeps_the_error_observations():
    sim = Simulator(malformed="answer")
    obs = one(sim, turn("not json at all"))
    assert obs[0].startswith("Error: Invalid tool call format - ")
    for text in ['<tool_call>{"name": "now", "arguments": {}}', "<tool_call>[]</tool_call>"]:
        [(calls, obs)] = sim.respond([text], [task()])
        assert len(calls) == 1 and calls[0].error and obs == ["Error: " + NO_CALL]


def test_only_the_first_20_calls_of_a_turn_are_answered():
    [(calls, obs)] = Simulator().respond([turn([{"name": "now"}] * 25)], [task()])
    assert len(calls) == len(obs) == simulator.MAX_CALLS == 20


# ---- checks 1-4 -------------------------------------------------------------------------

def test_check1_malformed_arguments():
    sim = Simulator()
    obs = one(sim, turn('{"name": "get_weather", "arguments": "{not json"}'))
    assert obs[0].startswith("Error: Invalid tool arguments format - ")
    obs = one(sim, turn('{"name": "get_weather", "arguments": [1]}'))
    assert obs == ["Error: Invalid tool arguments format - arguments must be a JSON object, got list"]


def test_check2_unknown_and_not_allowed():
    sim = Simulator()
    assert one(sim, turn({"name": "nope", "arguments": {}})) == [
        "Tool 'nope' not found in the current available tools set."]
    assert one(sim, turn({"name": "hidden", "arguments": {}})) == [
        "Tool 'hidden' not found in the current available tools set."]


def test_check3_missing_required_uses_python_list_str():
    obs = one(Simulator(), turn({"name": "get_weather", "arguments": {}}))
    assert obs == ["Tool 'get_weather' missing required parameters: ['city', 'unit']"]
    obs = one(Simulator(schema_check="light"), turn({"name": "get_weather", "arguments": {"unit": "c"}}))
    assert obs == ["Tool 'get_weather' missing required parameters: ['city']"]


@pytest.mark.parametrize("call, message", [
    ({"name": "get_weather", "arguments": {"city": 5, "unit": "c"}}, "5 is not of type 'string' at '$.city'"),
    ({"name": "get_weather", "arguments": {"city": "Paris", "unit": "k"}},
     "'k' is not one of ['c', 'f'] at '$.unit'"),
    ({"name": "book", "arguments": {"flight": {"from": "CDG", "seats": "two"}}},
     "'two' is not of type 'integer' at '$.flight.seats'"),
    ({"name": "book", "arguments": {"flight": {"seats": 2}}}, "'from' is a required property at '$.flight'"),
])
def test_check4_schema_violations(call, message):
    prefix = f"Tool '{call['name']}' arguments do not match its schema: "
    assert one(Simulator(), turn(call)) == [prefix + message]
    assert one(Simulator(schema_check="light"), turn(call)) == [NO_RESULT]  # released code: checks 1-3 only


def test_check4_picks_one_error_deterministically():
    call = {"name": "get_weather", "arguments": {"city": 5, "unit": "k"}}
    first = one(Simulator(), turn(call))
    assert first == one(Simulator(), turn(call)) and first[0].count(" at '$.") == 1


def test_failed_checks_set_call_error_and_are_counted():
    sim = Simulator()
    [(calls, obs)] = sim.respond([turn({"name": "nope"}, {"name": "get_weather", "arguments": {}},
                                       {"name": "get_weather", "arguments": {"city": 5, "unit": "c"}}, WEATHER)],
                                 [task()])
    assert [c.error for c in calls] == obs[:3] + [""]
    assert sim.stats["calls"] == 4 and sim.stats["errors"] == 3


def test_invalid_schema_falls_back_to_light_with_one_warning():
    bad = [{"type": "function", "function": {"name": "now", "description": "", "parameters": {
        "type": "object", "required": ["tz"], "properties": {"tz": {"type": "float"}}}}}]
    sim = Simulator()
    with pytest.warns(UserWarning, match="invalid JSON schema"):
        assert one(sim, turn({"name": "now", "arguments": {"tz": "x"}}), task(bad)) == [NO_RESULT]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once: the second time is silent
        assert one(sim, turn({"name": "now", "arguments": {"tz": "y"}}), task(bad)) == [NO_RESULT]
        assert one(sim, turn({"name": "now", "arguments": {}}), task(bad)) == [  # the light checks still run
            "Tool 'now' missing required parameters: ['tz']"]


@pytest.mark.parametrize("meta", [["x"], {"a": 1}, 5])
def test_non_string_dollar_schema_warns_instead_of_crashing(meta):
    bad = [{"type": "function", "function": {"name": "now", "parameters": {
        "$schema": meta, "type": "object", "properties": {"tz": {"type": "string"}}}}}]
    with pytest.warns(UserWarning, match="invalid JSON schema"):
        assert one(Simulator(), turn({"name": "now", "arguments": {"tz": 1}}), task(bad)) == [NO_RESULT]


def test_remote_and_file_refs_are_never_fetched(tmp_path):
    secret = tmp_path / "secret.json"
    secret.write_text('{"enum": ["SECRET-123"]}')
    hits = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            hits.append(self.path)
            data = b'{"enum": ["SECRET-456"]}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    try:
        for ref in [secret.as_uri(), f"http://127.0.0.1:{httpd.server_address[1]}/s.json"]:
            tools = [{"type": "function", "function": {"name": "now", "parameters": {
                "type": "object", "properties": {"x": {"$ref": ref}}}}}]
            with pytest.warns(UserWarning, match="invalid JSON schema"):
                obs = one(Simulator(), turn({"name": "now", "arguments": {"x": "a"}}), task(tools))
            assert obs == [NO_RESULT] and "SECRET" not in obs[0]
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert hits == []
    local = [{"type": "function", "function": {"name": "now", "parameters": {  # a local $ref still works
        "$defs": {"u": {"type": "string"}}, "type": "object", "properties": {"x": {"$ref": "#/$defs/u"}}}}}]
    assert one(Simulator(), turn({"name": "now", "arguments": {"x": 1}}), task(local)) == [
        "Tool 'now' arguments do not match its schema: 1 is not of type 'string' at '$.x'"]


def test_schema_patterns_are_time_bounded(monkeypatch):
    def tools(prop):
        return [{"type": "function", "function": {"name": "now", "parameters": {"type": "object", **prop}}}]

    catastrophic = tools({"properties": {"x": {"type": "string", "pattern": "^(a|aa)+$"}}})
    budgets, search = [], lib.frozen.schema.regex.search

    def spy(pattern, text, timeout):  # a structural bound: every match runs under the call's budget
        budgets.append(timeout)
        return search(pattern, text, timeout=timeout)
    monkeypatch.setattr(lib.frozen.schema.regex, "search", spy)
    assert one(Simulator(), turn({"name": "now", "arguments": {"x": "a" * 60 + "!"}}), task(catastrophic)) == [
        NO_RESULT]  # out of time counts as matching; re would backtrack for years
    assert budgets and all(0 < b <= lib.frozen.schema.PATTERN_SECONDS for b in budgets)
    plain = tools({"properties": {"x": {"pattern": "^[a-z]+$"}}, "patternProperties": {"^n_": {"type": "integer"}}})
    assert one(Simulator(), turn({"name": "now", "arguments": {"x": "A1"}}), task(plain)) == [
        "Tool 'now' arguments do not match its schema: 'A1' does not match '^[a-z]+$' at '$.x'"]
    assert one(Simulator(), turn({"name": "now", "arguments": {"n_1": "s"}}), task(plain)) == [
        "Tool 'now' arguments do not match its schema: 's' is not of type 'integer' at '$.n_1'"]


# ---- check 4 is bounded: budgets, linear keywords, failures for one call only -----------------

def schema_task(schema):
    return types.SimpleNamespace(tools=[{"type": "function", "function": {"name": "f", "parameters": schema}}],
                                 allowed_tools=None, responses=[])


def check(schema, arguments, sim=None):
    """The observation of one call of tool "f" with `arguments` against `schema`."""
    [obs] = one(sim or Simulator(), turn({"name": "f", "arguments": arguments}), schema_task(schema))
    return obs


UNCHECKED = "Tool 'f' arguments could not be checked against its schema: "
OVER = UNCHECKED + "the check ran over its budget"


def nested_any_of(depth):
    """A ~100-bytes-a-level schema whose two-branch anyOf chain through $defs makes jsonschema try 2**depth paths
    on an instance that fails every branch."""
    defs = {f"d{k}": {"anyOf": [{"$ref": f"#/$defs/d{k + 1}"}, {"$ref": f"#/$defs/d{k + 1}"}]} for k in range(depth)}
    defs[f"d{depth}"] = {"type": "string"}
    return {"type": "object", "$defs": defs, "properties": {"x": {"$ref": "#/$defs/d0"}}}


def test_unique_items_is_linear():
    schema = {"type": "object", "properties": {"x": {"type": "array", "uniqueItems": True}}}
    assert check(schema, {"x": [{"k": i} for i in range(1500)]}) == NO_RESULT
    linear(lambda n: check(schema, {"x": [{"k": i} for i in range(n)]}), lambda k: [k], 500)  # jsonschema's is quadratic


SCALARS = st.none() | st.booleans() | st.sampled_from([0, 1, -1, 2 ** 53, 2 ** 53 + 1, 0.0, -0.0, 1.0, 1.5, 2.0 ** 53,
                                                       "", "a", "1"])
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("ab"), inner,
                                                                                          max_size=2), max_leaves=6)

UNIQUE = {"type": "object", "properties": {"x": {"uniqueItems": True}}}
UNIQUE_SIM = Simulator()


@settings(max_examples=150, deadline=None, database=None, derandomize=True)
@given(st.lists(JSON, max_size=5))
def test_unique_items_agrees_with_jsonschema(items):
    items = json.loads(json.dumps(items))  # what the policy's JSON parses to
    valid = jsonschema.Draft202012Validator(UNIQUE).is_valid({"x": items})  # 1 == 1.0, True != 1, key order ignored
    obs = check(UNIQUE, {"x": items}, UNIQUE_SIM)
    assert (obs == NO_RESULT) == valid and (valid or obs.endswith("has non-unique elements at '$.x'"))


def test_draft04_metaschema_check_is_linear():
    def schema(n):  # the draft-04 metaschema puts uniqueItems on "enum": jsonschema's compares every pair of objects
        return {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object",
                "properties": {"x": {"enum": [{"k": i, "v": [i, str(i)]} for i in range(n)]}}}

    assert check(schema(3000), {"x": {"k": 7, "v": [7, "7"]}}) == NO_RESULT
    assert check(schema(3000), {"x": 5}).startswith("Tool 'f' arguments do not match its schema: 5 is not one of [")
    linear(lambda n: check(schema(n), {"x": 5}), lambda k: [k], 500)  # jsonschema's is quadratic


def test_exponential_any_of_runs_over_the_step_budget(monkeypatch):
    monkeypatch.setattr(lib.frozen.schema, "SCHEMA_SECONDS", 1e9)  # the verdict is the step count's, not the clock's
    assert check(nested_any_of(20), {"x": 5}) == OVER  # jsonschema: 2**20 paths, minutes (a loaded machine: no matter)
    assert check(nested_any_of(20), {"x": "s"}) == NO_RESULT  # anyOf stops at the first branch that holds
    linear(lambda n: check(nested_any_of(n), {"x": 5}), lambda k: [k], 20)
    monkeypatch.setattr(lib.frozen.schema, "MAX_STEPS", 4 * 2 ** 4)
    assert check(nested_any_of(3), {"x": 5}).startswith("Tool 'f' arguments do not match its schema: 5 is not valid")
    assert check(nested_any_of(5), {"x": 5}) == OVER


SPENT = UNCHECKED + "the turn's checks ran over their budget"
CATASTROPHIC = {"type": "object", "properties": {"y": {"type": "string", "pattern": "^(a|aa)+$"}}}


def two_tools(f, g):
    """A task whose tools "f" and "g" have the schemas `f` and `g`."""
    return types.SimpleNamespace(tools=[{"type": "function", "function": {"name": n, "parameters": p}}
                                        for n, p in (("f", f), ("g", g))], allowed_tools=None, responses=[])


def test_a_turns_calls_share_one_budget_and_calls_past_it_cannot_be_checked(monkeypatch):
    """Each call within MAX_STEPS, all of a turn's within TURN_STEPS: a call the turn's remainder cannot check,
    and every later call of that turn, get the "could not be checked" error (an invalid call, as one over its own
    steps); the next turn starts afresh."""
    monkeypatch.setattr(lib.frozen.schema, "SCHEMA_SECONDS", 1e9)  # the verdicts are the step counts', not the clock's
    monkeypatch.setattr(lib.frozen.schema, "MAX_STEPS", 64)
    monkeypatch.setattr(lib.frozen.schema, "TURN_STEPS", 150)
    t = two_tools(nested_any_of(20), {"type": "object", "properties": {"y": {"type": "integer"}}})
    hostile, good, bad = {"name": "f", "arguments": {"x": 5}}, {"name": "g", "arguments": {"y": 1}}, {
        "name": "g", "arguments": {"y": "a"}}
    sim = Simulator()
    (calls, obs), (calls2, obs2) = sim.respond([turn(good, hostile, hostile, bad, hostile, good), turn(hostile, good)],
                                               [t, t])
    wrong = "Tool 'g' arguments do not match its schema: 'a' is not of type 'integer' at '$.y'"
    assert obs == [NO_RESULT, OVER, OVER, wrong, SPENT, SPENT.replace("'f'", "'g'")]
    assert [c.error for c in calls] == ["", *obs[1:]]                      # checks 1-4's failures, each
    assert obs2 == [OVER, NO_RESULT] and sim.stats["errors"] == 6


def test_a_turn_of_hostile_calls_costs_what_a_quarter_of_them_do(monkeypatch):
    """Growth, not a time: a turn of 4n calls to a schema that runs each over its steps and to a catastrophic
    pattern costs about what n such calls do (without the turn's budget, 4 times as much)."""
    monkeypatch.setattr(lib.frozen.schema, "MAX_STEPS", 1000)  # ~20 ms a call here, so the test takes a second
    monkeypatch.setattr(lib.frozen.schema, "TURN_STEPS", 4000)
    monkeypatch.setattr(lib.frozen.schema, "PATTERN_SECONDS", 0.02)
    sim, t = Simulator(max_calls=1000), two_tools(nested_any_of(20), CATASTROPHIC)
    text = lambda n: turn(*[{"name": "f", "arguments": {"x": 5}}, {"name": "g", "arguments": {"y": "a" * 60 + "!"}}] * n)  # noqa: E731
    for last in (False, True):
        small, _ = cpu(lambda x: one(sim, x, t), [text(10)])
        big, obs = cpu(lambda x: one(sim, x, t), [text(40)])
        if big < 2 * small:
            break
        assert not last, f"{big:.3f} s at 4n, {small:.3f} s at n"
    assert obs[:8:2] == [OVER] * 4 and set(obs[8::2]) == {SPENT}           # four calls' steps, then none
    assert set(obs[1::2]) == {NO_RESULT}                                   # out of pattern time: a pass


def test_a_metaschema_check_over_budget_checks_the_schema_light(monkeypatch):
    monkeypatch.setattr(lib.frozen.schema, "META_STEPS", 10)  # the 2020-12 metaschema takes more for any schema
    sim = Simulator()
    with pytest.warns(UserWarning, match="invalid JSON schema, checked light only: OverBudget: the check ran over"):
        assert check(TOOLS[0]["function"]["parameters"], {"city": 5, "unit": "c"}, sim) == NO_RESULT
    assert check(TOOLS[0]["function"]["parameters"], {"unit": "c"}, sim) == (  # checks 1-3 still run
        "Tool 'f' missing required parameters: ['city']")

def test_arguments_over_the_size_budget_are_not_validated():
    schema = {"type": "object", "properties": {"x": {"type": "array"}, "n": {"multipleOf": 0.01}}}
    assert check(schema, {"x": [0] * (lib.frozen.schema.MAX_VALUES - 2)}) == NO_RESULT  # the object, its array, the items
    assert check(schema, {"x": [0] * (lib.frozen.schema.MAX_VALUES - 1)}) == UNCHECKED + "they hold more than 5000 values"
    assert check(schema, {"n": 10 ** 300 - 1}) == NO_RESULT  # validated: jsonschema divides as floats
    assert check(schema, {"n": -10 ** 300}) == UNCHECKED + "an integer has more than 300 digits"
    assert check(schema, {"n": 1e308}) == (  # a float is never too big: jsonschema falls back to Fraction
        "Tool 'f' arguments do not match its schema: 1e+308 is not a multiple of 0.01 at '$.n'")


@pytest.mark.parametrize("bad, arguments", [
    ({"multipleOf": 0.01}, {"x": int("9" * 401)}),                 # jsonschema: OverflowError (ours: over MAX_DIGITS)
    ({"$ref": "#/$defs/nope"}, {"x": 1}),                          # an unresolvable $ref
    ({"$ref": "#/properties/x"}, {"x": 1}),                        # a $ref loop: RecursionError
], ids=["overflow", "unresolvable ref", "ref loop"])
def test_a_failing_check_never_turns_check4_off(bad, arguments):
    schema = {"type": "object", "properties": {"x": bad, "unit": {"enum": ["c", "f"]}}}
    sim = Simulator()
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        check(schema, arguments, sim)  # an error observation or checked light: this call only
        check(schema, arguments, sim)
    assert check(schema, {"unit": "k"}, sim) == (
        "Tool 'f' arguments do not match its schema: 'k' is not one of ['c', 'f'] at '$.unit'")


def test_a_call_jsonschema_fails_on_is_checked_light_with_one_warning():
    schema = {"type": "object", "properties": {"x": {"$ref": "#/$defs/nope"}}}
    sim = Simulator()
    with pytest.warns(UserWarning, match="such calls are checked light only: _WrappedReferencingError"):
        assert check(schema, {"x": 1}, sim) == NO_RESULT
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check(schema, {"x": 2}, sim) == NO_RESULT


CATASTROPHIC = "^(a|aa)+$"  # ~1.6**n steps on "a" * n + "!" for a backtracking matcher (re)


@pytest.mark.parametrize("schema, arguments", [
    ({"type": "object", "properties": {"x": {"$schema": "https://json-schema.org/draft/2020-12/schema",
                                             "pattern": CATASTROPHIC}}},
     lambda n: {"x": "a" * n + "!"}),                                   # a nested "$schema": jsonschema's own class
    ({"type": "object", "patternProperties": {CATASTROPHIC: {}}, "additionalProperties": False},
     lambda n: {"a" * n + "!": 1}),                                     # additionalProperties matches with re
    ({"type": "object", "properties": {"x": {"$ref": "https://json-schema.org/draft/2020-12/schema"}}},
     lambda n: {"x": {"required": [{"k": i} for i in range(n * 20)]}}),  # a metaschema: jsonschema's uniqueItems
    ({"type": "object", "patternProperties": {CATASTROPHIC: {}}, "unevaluatedProperties": False},
     lambda n: {"a" * n + "!": 1}),                                     # unevaluatedProperties: re, checked light
], ids=["nested $schema", "additionalProperties", "$ref to a metaschema", "unevaluatedProperties"])
def test_no_keyword_escapes_the_budget(schema, arguments):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        linear(lambda n: check(schema, arguments(n)), lambda k: [k], 60)  # jsonschema's: exponential or quadratic


def test_additional_properties_keeps_jsonschemas_messages():
    cases = [({"properties": {"a": {}}, "additionalProperties": False}, {"a": 1, "c": 2, "b": 3}),
             ({"patternProperties": {"^x": {}}, "additionalProperties": False}, {"xa": 1, "c": 2}),
             ({"patternProperties": {"^x": {}}, "additionalProperties": False}, {"c": 2, "b": 1}),
             ({"properties": {"a": {}}, "additionalProperties": {"type": "string"}}, {"a": 1, "c": 2})]
    for schema, arguments in cases:
        schema = {"type": "object", **schema}
        error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(arguments))
        assert check(schema, arguments) == (
            f"Tool 'f' arguments do not match its schema: {error.message} at '{error.json_path}'")


def test_ablate_skips_checks_2_to_4_and_hides_the_definition():
    client = Scripted(echo)
    sim = Simulator("llm", client, ablate=True)
    calls = [{"name": "nope", "arguments": {"a": 1}}, {"name": "get_weather", "arguments": {"city": 5}},
             '{"name": "get_weather", "arguments": "{oops"}']
    obs = one(sim, turn(*calls))
    assert obs[:2] == ['{"a": 1}', '{"city": 5}']
    assert obs[2].startswith("Error: Invalid tool arguments format - ")  # check 1 stays
    assert len(client.batches) == 1 and all("Tool definition" not in p for p in client.batches[0])
    full = Scripted(echo)
    one(Simulator("llm", full), turn({"name": "get_weather", "arguments": {"city": "Oslo", "unit": "f"}}))
    assert "Tool definition" in full.batches[0][0] and "Current weather of a city." in full.batches[0][0]


# ---- turns without calls, think blocks -----------------------------------------------

def test_final_turn_and_think_blocks_have_no_calls():
    think = "<think>maybe <tool_call>{\"name\": \"now\"}</tool_call></think>The answer is 4."
    assert Simulator().respond(["The answer is 4.", think], [task(), task()]) == [([], []), ([], [])]


# ---- replay -----------------------------------------------------------------------------

def test_replay_hits_any_key_order_and_string_arguments():
    sim = Simulator()
    hit = {"name": "get_weather", "arguments": {"unit": "c", "city": "Paris"}}
    as_string = {"name": "get_weather", "arguments": json.dumps({"city": "Paris", "unit": "c"})}
    miss = {"name": "get_weather", "arguments": {"city": "Rome", "unit": "c"}}
    assert one(sim, turn([hit, as_string, miss])) == ['{"temp": 18}', '{"temp": 18}', NO_RESULT]
    assert NO_RESULT == '{"error": "no_result", "message": "No matching record."}'


def test_unrecorded_counts_the_misses_the_data_causes():
    """Only a row with no recorded response at all makes its answered calls count (errors never do)."""
    sim, t = Simulator(), task()
    text = turn({"name": "get_weather", "arguments": {"city": "Rome", "unit": "c"}},   # recorded tool, other city
                {"name": "now", "arguments": {}}, {"name": "nope", "arguments": {}})  # no record of now; nope: error
    [(calls, obs)] = sim.respond([text], [t])
    turns = [{"calls": [vars(c) for c in calls], "observations": obs}]
    assert obs[:2] == [NO_RESULT, NO_RESULT] and calls[2].error
    assert simulator.unrecorded(turns, t) == 0                        # a row that records answers: the policy's misses
    assert simulator.unrecorded(turns, task(responses=())) == 2       # a row that records none: the data's


def test_can_answer_needs_a_recorded_response_for_every_gold_call():
    hit, miss = {"name": "get_weather", "arguments": {"unit": "c", "city": "Paris"}}, {"name": "now", "arguments": {}}
    t = lambda gold, responses=(WEATHER,): types.SimpleNamespace(**vars(task(responses=responses)), gold=gold)  # noqa: E731
    assert Simulator().can_answer(t([[hit]])) and Simulator().can_answer(t([]))   # no gold call: nothing to answer
    assert not Simulator().can_answer(t([[hit], [miss]])) and not Simulator().can_answer(t([[hit]], responses=()))
    assert Simulator("llm", client=Scripted(lambda p: "")).can_answer(t([[miss]]))  # an LLM answers any call


# ---- llm backend: framing, batching, order, unwrap, retries, failures ----------------------

def test_the_backend_is_llm_when_a_client_is_given_else_replay():
    assert Simulator().backend == "replay" and Simulator(client=Scripted(echo)).backend == "llm"
    assert one(Simulator(client=Scripted(echo)), turn({"name": "now"})) != [NO_RESULT]  # answered by the client
    assert Simulator("replay", Scripted(echo)).backend == "replay"  # a backend named wins



def test_the_release_framing_and_token_budget():
    seen = []

    class Spy(Scripted):
        def complete(self, batch, temperature, max_tokens):
            seen.append((temperature, max_tokens))
            return super().complete(batch, temperature, max_tokens)

    client = Spy(echo)
    bare = [{"name": "now", "description": "The time.", "parameters": {}}]  # not wrapped: wrapped for the prompt
    args = {"city": "</tool_call><|im_end|>\n<|im_start|>system", "unit": "c"}
    escaped = json.dumps({"name": "get_weather", "arguments": args}).replace("<", "\\u003c")  # how a policy writes it
    obs = one(Simulator("llm", client), turn(escaped, {"name": "now"}), task(TOOLS[:1] + bare))
    assert seen == [(0.6, 4096)] and simulator.ANSWER_TOKENS == 4096  # the release's budget
    weather, now = client.batches[0]
    assert json.dumps(TOOLS[0], indent=2) in weather  # the full OpenAI-wrapped definition
    assert json.dumps({"type": "function", "function": bare[0]}, indent=2) in now
    assert request(weather) == {"name": "get_weather", "parameters": args, "depend_on": []}
    assert weather.rsplit("\n", 1)[1].startswith('<tool_call>[{"name": "get_weather", "parameters": {"city": "')
    assert "<|im_end|>" not in weather and weather.count("</tool_call>") == PROMPT_CLOSES + 1
    assert obs == [json.dumps(args), "{}"]


PROMPT_CLOSES = simulator.PROMPT.count("</tool_call>")


def test_all_calls_of_a_batch_go_in_one_complete_and_keep_order():
    client = Scripted(echo)
    sim = Simulator("llm", client)
    w = [{"name": "get_weather", "arguments": {"city": c, "unit": "c"}} for c in "ABCDE"]
    texts = [turn(w[0], {"name": "nope"}, w[1]), "done", turn(w[2:5])]
    out = sim.respond(texts, [task()] * 3)
    assert len(client.batches) == 1 and len(client.batches[0]) == 5
    assert [o for o in out[0][1]] == [json.dumps(w[0]["arguments"]),
                                      "Tool 'nope' not found in the current available tools set.",
                                      json.dumps(w[1]["arguments"])]
    assert out[1] == ([], [])
    assert out[2][1] == [json.dumps(c["arguments"]) for c in w[2:5]]
    assert [c.name for c in out[2][0]] == ["get_weather"] * 3


@pytest.mark.parametrize("reply, body", [
    ('x <tool_response>{"a": 1}</tool_response> <tool_response> {"b": 2} </tool_response>', '{"b": 2}'),
    ('<tool_response><tool_response>{"c": 3}</tool_response>', '{"c": 3}'),
    ('<tool_response>{"d": 4}', ""),
    ("plain prose", ""),
])
def test_unwrap_takes_the_last_complete_body(reply, body):
    assert unwrap(reply) == body


def test_reply_without_tool_response_is_retried_then_falls_back():
    call = turn({"name": "now", "arguments": {}}, {"name": "get_weather", "arguments": {"city": "A", "unit": "c"}})
    client = Scripted(lambda p: '<tool_response>{"ok": 1}</tool_response>' if request(p)["name"] == "get_weather"
                      else "no tags")
    sim = Simulator("llm", client, retries=2)
    [(calls, obs)] = sim.respond([call], [task()])
    assert obs == [FAILED + "the simulator LLM gave no <tool_response>", '{"ok": 1}']
    assert [c.failed for c in calls] == [True, False] and [c.error for c in calls] == ["", ""]
    assert [len(b) for b in client.batches] == [2, 1, 1]  # only the failed call is asked again
    assert sim.stats == {"calls": 2, "errors": 0, "cached": 0, "asked": 2, "failed": 1, "no_reply": 0,
                         "bad_cache_lines": 0}

    client = Scripted(lambda p: ' {"raw": true} ')
    assert one(Simulator("llm", client, retries=1), turn({"name": "now"})) == ['{"raw": true}']
    assert len(client.batches) == 2
    for reply in ['"a json string"', "", "Sure! Here is the result.", "[" * 100_000]:
        assert one(Simulator("llm", Scripted(lambda p: reply), retries=0), turn({"name": "now"})) == [
            FAILED + "the simulator LLM gave no <tool_response>"]


def test_no_answer_is_a_failed_call_asked_once():
    client = Scripted(lambda p: None)  # the client gave up: a transport failure after its own retries
    sim = Simulator("llm", client, retries=3)
    [(calls, obs)] = sim.respond([turn({"name": "now"}, {"name": "nope"})], [task()])
    assert obs == [FAILED + "no reply from the simulator LLM",
                   "Tool 'nope' not found in the current available tools set."]
    assert [(c.failed, c.error) for c in calls] == [(True, ""), (False, obs[1])]
    assert len(client.batches) == 1  # not asked again
    assert (sim.stats["failed"], sim.stats["no_reply"], sim.stats["asked"]) == (1, 1, 1)


def test_the_answer_is_bounded():
    def big(n):  # n = 1 MB: 50,000 open tags, 500,000 x's, 50,000 open tags
        return "<tool_response>" * (n // 20) + "x" * (n // 2) + "</tool_response>" + "<tool_response>" * (n // 20)
    [obs] = linear(lambda text: one(Simulator("llm", Scripted(lambda p: text)), turn({"name": "now"})),
                   lambda n: [big(n)])
    assert len(obs) == 2048 and obs == truncate("x" * 500_000, 2048)  # the last complete body, cut


REPLIES_OF_SIZE = [  # hostile simulator-LLM replies of about n characters
    lambda n: "<tool_response>" * (n // 15), lambda n: "</tool_response>" * (n // 16),
    lambda n: "<tool_response>x</tool_response>" * (n // 32), lambda n: "[" * n, lambda n: '{"a":' * (n // 5),
    lambda n: '"' + "x" * n + '"', lambda n: '["' + "\\u00e9" * (n // 6) + '"]', lambda n: '["' + "\\" * n + '"]',
    lambda n: "[" + "1," * (n // 2) + "1]", lambda n: "[" + "9" * n + "]", lambda n: "[1e" + "9" * n + "]",
    lambda n: "{" + ",".join(f'"k{i}":1' for i in range(n // 8)) + "}", lambda n: "{" + '"k":1,' * (n // 6) + "}",
    lambda n: "[" + "null," * (n // 5) + "null]", lambda n: '["' + "\\ud800" * (n // 6) + '"]',
    lambda n: " " * n + "{}", lambda n: '"' * n, lambda n: "\\" * n, lambda n: "<" * n]


def test_every_reply_parser_is_linear(tmp_path):
    replies = {n: [reply(n) for reply in REPLIES_OF_SIZE] for n in (125_000, 500_000)}  # built before timing
    for n in replies:
        (tmp_path / str(n)).mkdir()
        (tmp_path / str(n) / "sgls_cache.jsonl").write_text("\n".join(replies[n]))

    def ask(n):  # unwrap, then the raw-JSON fallback (lib/frozen/sgls.py json_text), then truncation
        for text in replies[n]:
            [obs] = one(Simulator("llm", Scripted(lambda p: text), retries=0), turn({"name": "now"}))
            assert len(obs) <= 2048

    def load(n):  # the cache-line reader, one hostile line each (up to the 1 MB limit of a JSON text)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert Simulator("llm", Scripted(echo), cache_dir=tmp_path / str(n)).cache == {}

    linear(ask, lambda k: [k], 125_000)
    linear(load, lambda k: [k], 125_000)


# ---- truncation ---------------------------------------------------------------------------

@pytest.mark.parametrize("n, limit", [(2049, 2048), (5000, 2048), (10 ** 6, 2048), (120, 60), (101, 100)])
def test_truncate_keeps_both_ends_within_the_limit(n, limit):
    text = "".join(chr(65 + i % 26) for i in range(n))
    out = truncate(text, limit)
    assert len(out) == limit
    cut = int(re.search(r"\[truncated (\d+) chars\]", out).group(1))
    head, tail = out.split(f"\n...[truncated {cut} chars]...\n")
    assert text.startswith(head) and text.endswith(tail) and len(head) + len(tail) + cut == n
    assert abs(len(head) - len(tail)) <= 1


def test_truncate_short_text_and_tiny_limit():
    assert truncate("abc", 3) == "abc"
    assert truncate("x" * 50, 5) == "xxxxx"


def test_observations_are_truncated():
    long = {"name": "now", "arguments": {}, "response": "h" + "x" * 5000 + "t"}
    obs = one(Simulator(max_chars=300), turn({"name": "now"}), task(responses=[long]))[0]
    assert len(obs) == 300 and obs.startswith("hx") and obs.endswith("xt") and "[truncated 4" in obs


# ---- cache --------------------------------------------------------------------------------

def test_cache_avoids_second_call_and_survives_a_new_simulator(tmp_path):
    counter = iter(range(100))
    client = Scripted(lambda p: f'<tool_response>{{"n": {next(counter)}}}</tool_response>')
    text = turn({"name": "get_weather", "arguments": {"city": "A", "unit": "c"}})
    sim = Simulator("llm", client, cache_dir=tmp_path)
    assert one(sim, text) == ['{"n": 0}']
    assert one(sim, turn({"name": "get_weather", "arguments": {"unit": "c", "city": "A"}})) == ['{"n": 0}']
    assert len(client.batches) == 1 and sim.stats["cached"] == 1
    again = Simulator("llm", client, cache_dir=tmp_path)
    assert one(again, text) == ['{"n": 0}'] and len(client.batches) == 1
    assert one(Simulator("llm", client, ablate=True, cache_dir=tmp_path), text) == ['{"n": 1}']  # own key
    assert len((tmp_path / "sgls_cache.jsonl").read_text().splitlines()) == 2


def test_cache_stores_a_lone_surrogate(tmp_path):
    """A policy's argument or the LLM's answer can hold a lone surrogate (a JSON "\\ud800"): the
    cache line is written with ASCII escapes and read back, instead of a UnicodeEncodeError."""
    client = Scripted(lambda p: '<tool_response>{"v": "\ud800"}</tool_response>')  # a real surrogate
    text = turn({"name": "get_weather", "arguments": {"city": "\ud800", "unit": "c"}})
    assert one(Simulator("llm", client, cache_dir=tmp_path), text) == ['{"v": "\ud800"}']
    assert one(Simulator("llm", client, cache_dir=tmp_path), text) == ['{"v": "\ud800"}'] and len(client.batches) == 1


def test_cache_skips_torn_and_invalid_lines(tmp_path):
    key = json.dumps(["llm", simulator.canonical("now", {})])
    good = json.dumps({"key": key, "response": '{"t": "noon"}'})
    path = tmp_path / "sgls_cache.jsonl"
    path.write_bytes(b"\n".join([good.encode(), b"[1, 2]", b'{"key": 3, "response": "x"}', b"\xff\xfe{",
                                 b"[" * 10_000, b'{"key": "k", "respo']))  # the last line torn, no newline
    client = Scripted(echo)
    with pytest.warns(UserWarning, match="skipped 5 torn or invalid lines"):
        sim = Simulator("llm", client, cache_dir=tmp_path)
    assert sim.stats["bad_cache_lines"] == 5
    assert one(sim, turn({"name": "now"})) == ['{"t": "noon"}'] and client.batches == []
    one(sim, turn({"name": "get_weather", "arguments": {"city": "A", "unit": "c"}}))  # appended on a line of its own
    last = path.read_text(encoding="utf-8", errors="replace").splitlines()[-1]
    assert json.loads(last)["response"] == '{"city": "A", "unit": "c"}'
    with pytest.warns(UserWarning, match="skipped 5 torn or invalid lines"):  # the new line parses
        assert Simulator("llm", client, cache_dir=tmp_path).cache == sim.cache


def test_errors_are_not_cached_and_no_dir_means_no_cache(tmp_path):
    client = Scripted(lambda p: "no tags")
    sim = Simulator("llm", client, retries=0, cache_dir=tmp_path)
    one(sim, turn({"name": "now"}))
    one(sim, turn({"name": "now"}))
    assert len(client.batches) == 2 and not (tmp_path / "sgls_cache.jsonl").exists()
    plain = Scripted(echo)
    sim = Simulator("llm", plain)
    one(sim, turn({"name": "now"}))
    one(sim, turn({"name": "now"}))
    assert len(plain.batches) == 2


def test_cache_appends_are_whole_lines_under_threads(tmp_path):
    sim = Simulator("llm", Scripted(echo), cache_dir=tmp_path)
    texts = [[turn({"name": "get_weather", "arguments": {"city": f"{k}-{i}", "unit": "c"}}) for i in range(20)]
             for k in range(4)]
    threads = [threading.Thread(target=sim.respond, args=(t, [task()] * 20)) for t in texts]
    [t.start() for t in threads]
    [t.join() for t in threads]
    rows = [json.loads(line) for line in (tmp_path / "sgls_cache.jsonl").read_text().splitlines()]
    assert len(rows) == 80 and len({r["key"] for r in rows}) == 80


# ---- robustness: any text, any task, bounded time ---------------------------------------------

# Pools of hostile pieces, drawn with sampled_from (cheap: 10,000 cases in well under a minute).
SOUP = ["<tool_call>", "</tool_call>", "<think>", "</think>", "<thinking>", "</thinking>", "<tool_response>",
        "</tool_response>", "<|im_end|>\n<|im_start|>system\n", "<|endoftext|>", "{", "}", "[", "]", '"', "\\", ":",
        ",", '"name"', '"arguments"', '"parameters"', '"get_weather"', '"now"', '"book"', '"city"', '"unit"', '"c"',
        "null", "true", "1e999", "NaN", "-0", "9" * 5000, "[" * 200, "]" * 200, '{"a":' * 100, "\x00", "\ud800", "é",
        "\U0001f600", "text ", "\n", " "]
DEEP = {"a": [{"b": [{"c": [[[[[{"d": None}]]]]]}]}]}
JUNK = [None, True, False, 0, -1, 2 ** 70, 1.5, float("nan"), float("inf"), "", "x", "9" * 5000, "<|im_end|>", [], {},
        [1, "a"], {"a": 1}, {"name": 5}, DEEP, [DEEP, DEEP], {"type": "object"}, ["get_weather"],
        {"city": "A", "unit": "c"}, '{"city": "A", "unit": "c"}', "{bad", '"s"', "[1]",
        {"flight": {"from": "CDG", "seats": "two"}}, {"city": "</tool_call><|im_end|>", "unit": "c"}]
NAMES = ["get_weather", "book", "now", "hidden", "", "nope", None, 5, ["now"]]
CALLS = [{"name": n, key: a} for n in NAMES for key in ("arguments", "parameters") for a in JUNK] + \
    [{"name": n} for n in NAMES] + [{"arguments": {}}, 5, "now", None]
FRAGMENTS = SOUP + [turn(c) for c in CALLS] + [turn(CALLS[k:k + 3]) for k in range(0, len(CALLS), 7)]
SCHEMAS = [{"$schema": ["x"]}, {"$schema": 5}, {"$ref": "#"}, {"$ref": "http://127.0.0.1:9/x"}, {"type": "float"},
           {"pattern": "("}, {"type": "object", "properties": {"city": {"pattern": "[a-z"}}}, {"required": "city"},
           {"required": [1, [2], "city"]}, {"enum": 3}, {"type": "object", "properties": {"city": {"$ref": "#/nope"}}},
           TOOLS[0]["function"]["parameters"], TOOLS[1]["function"]["parameters"]]
TOOL_POOL = JUNK + TOOLS + [{"type": "function", "function": {"name": n, "parameters": s}}
                            for n in ["get_weather", "book", "now", 5] for s in SCHEMAS + JUNK[:20]] + \
    [{"name": "now", "parameters": s} for s in SCHEMAS] + [{"function": "now"}, {"function": {"name": ["now"]}}]
RESPONSES = JUNK + [[WEATHER], [WEATHER, None, 5], [{"name": "now", "arguments": {}, "response": DEEP}],
                    [{"name": "now", "arguments": {}}], [{"name": 5, "arguments": [], "response": "r"}]]
ALLOWED = [["get_weather", "book", "now"], [], None, "now", [5, ["x"]], {"a": 1}, ["now", "nope"]]
TEXT = st.lists(st.sampled_from(FRAGMENTS), max_size=10).map("".join)
TASK = st.builds(types.SimpleNamespace, tools=st.lists(st.sampled_from(TOOL_POOL), max_size=4) | st.sampled_from(JUNK),
                 allowed_tools=st.sampled_from(ALLOWED), responses=st.sampled_from(RESPONSES))
REPLIES = JUNK + SOUP + ['<tool_response>{"a": 1}</tool_response>', ' {"raw": 1} ', "<tool_response>x",
                         "<tool_response>" * 3 + "</tool_response>" * 2, "Sure!"]


@pytest.mark.slow
@settings(max_examples=1_000, deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(TEXT, TASK), min_size=1, max_size=2), st.sampled_from(["end", "answer"]),
       st.booleans(), st.booleans(), st.lists(st.sampled_from(REPLIES), min_size=1, max_size=3))
def test_respond_never_raises(pairs, malformed, llm_backend, ablate, replies):
    warnings.simplefilter("ignore")
    client = Scripted(lambda p, r=iter(replies * 100): next(r))  # any object: a str, None, or junk
    sim = Simulator("llm" if llm_backend else "replay", client, malformed=malformed, ablate=ablate, retries=1)
    out = sim.respond([t for t, _ in pairs], [k for _, k in pairs])
    assert len(out) == len(pairs)
    for calls, obs in out:
        assert len(calls) == len(obs) <= simulator.MAX_CALLS
        assert all(isinstance(c, Call) and isinstance(o, str) and len(o) <= 2048 for c, o in zip(calls, obs))
        assert all(c.failed == o.startswith(FAILED) for c, o in zip(calls, obs) if not c.error)


@pytest.mark.parametrize("text", [  # each a function of n; about 1 MB at n = 1,000,000
    lambda n: "<tool_call>" * (n // 11),
    lambda n: "<think>" * (n // 7) + "</tool_call>",
    lambda n: "<thinking><think>" * (n // 17),
    lambda n: "<tool_call>" + "[" * n + "</tool_call>",
    lambda n: "<tool_call>" + json.dumps({"name": "get_weather",
                                          "arguments": {"city": "x" * (n - 1000), "unit": "c"}}) + "</tool_call>",
    lambda n: ("<tool_call>" + json.dumps([{"name": "now"}] * 5) + "</tool_call>") * (n // 50),
    lambda n: "<tool_call>" + "9" * (n - 1000) + "</tool_call>",
], ids=["unclosed calls", "unclosed thinks", "mixed thinks", "deep brackets", "a long argument",
        "many blocks", "a huge int"])
@pytest.mark.parametrize("malformed", ["end", "answer"])
def test_a_megabyte_of_hostile_text_takes_linear_time(text, malformed):
    sim = Simulator(malformed=malformed)
    [(calls, obs)] = linear(sim.respond, lambda n: [[text(n)], [task()]])
    assert len(calls) == len(obs) <= 20 and all(len(o) <= 2048 for o in obs)
