"""SGLS simulator (SPEC §5): the checks and their strings, backends, truncation, cache."""
import json
import re
import threading
import types

import pytest
import torch

import simulator
from simulator import NO_CALL, NO_RESULT, Simulator, truncate, unwrap

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


def echo(prompt):
    """Answers with the arguments of the incoming call (the prompt's last line)."""
    call = json.loads(prompt.rsplit("\n", 1)[1])
    return f"<tool_response>{json.dumps(call['arguments'])}</tool_response>"


# ---- checks 1-4 -------------------------------------------------------------------------

def test_check1_malformed():
    sim = Simulator()
    obs = one(sim, turn('{"name": "get_weather", "arguments": "{not json"}'))
    assert obs[0].startswith("Error: Invalid tool arguments format - ")
    obs = one(sim, turn('{"name": "get_weather", "arguments": [1]}'))
    assert obs == ["Error: Invalid tool arguments format - arguments must be a JSON object, got list"]
    obs = one(sim, turn("not json at all"))
    assert obs[0].startswith("Error: Invalid tool call format - ")


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


def test_invalid_schema_falls_back_to_light_with_warning():
    bad = [{"type": "function", "function": {"name": "now", "description": "", "parameters": {
        "type": "object", "required": ["tz"], "properties": {"tz": {"type": "float"}}}}}]
    sim = Simulator()
    with pytest.warns(UserWarning, match="invalid JSON schema"):
        assert one(sim, turn({"name": "now", "arguments": {"tz": "x"}}), task(bad)) == [NO_RESULT]
    # the light checks still run
    assert one(sim, turn({"name": "now", "arguments": {}}), task(bad)) == [
        "Tool 'now' missing required parameters: ['tz']"]


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

@pytest.mark.parametrize("text", ['<tool_call>{"name": "now", "arguments": {}}', "<tool_call>[]</tool_call>"])
def test_turn_without_a_complete_call_gets_one_error(text):
    [(calls, obs)] = Simulator().respond([text], [task()])
    assert len(calls) == 1 and calls[0].error and obs == ["Error: " + NO_CALL]


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


# ---- llm backend: batching, order, unwrap, retries, fallbacks -----------------------------

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
    client = Scripted(lambda p: '<tool_response>{"ok": 1}</tool_response>' if "get_weather" in p.rsplit("\n", 1)[1]
                      else "no tags")
    assert one(Simulator("llm", client, retries=2), call) == ["Error when executing tool: the simulator LLM gave no "
                                                   "<tool_response>", '{"ok": 1}']
    assert [len(b) for b in client.batches] == [2, 1, 1]  # only the failed call is asked again

    client = Scripted(lambda p: ' {"raw": true} ')
    assert one(Simulator("llm", client, retries=1), turn({"name": "now"})) == ['{"raw": true}']
    assert len(client.batches) == 2
    for reply in ['"a json string"', "", "Sure! Here is the result."]:
        assert one(Simulator("llm", Scripted(lambda p: reply), retries=0), turn({"name": "now"})) == [
            "Error when executing tool: the simulator LLM gave no <tool_response>"]
    assert one(Simulator("llm", Scripted(lambda p: None), retries=2), turn({"name": "now"})) == [
        "Error when executing tool: no reply from the simulator LLM"]


def test_temperature_and_token_limit_reach_the_client():
    seen = []

    class Spy(Scripted):
        def complete(self, batch, temperature, max_tokens):
            seen.append((temperature, max_tokens))
            return super().complete(batch, temperature, max_tokens)

    one(Simulator("llm", Spy(echo)), turn({"name": "now"}))
    assert seen == [(0.6, simulator.MAX_TOKENS)]


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
    assert len(client.batches) == 1
    again = Simulator("llm", client, cache_dir=tmp_path)
    assert one(again, text) == ['{"n": 0}'] and len(client.batches) == 1
    assert one(Simulator("llm", client, ablate=True, cache_dir=tmp_path), text) == ['{"n": 1}']  # own key
    assert len((tmp_path / "sgls_cache.jsonl").read_text().splitlines()) == 2


def test_errors_are_not_cached_and_no_dir_means_no_cache(tmp_path):
    client = Scripted(lambda p: None)
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
