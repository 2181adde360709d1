"""lib/inputs/data.py loaders on every layout (the release's preview rows, good, malformed and hostile rows,
fuzzed rows), the release download (mocked) and the shipped tool world."""
import ast
import collections
import copy
import functools
import itertools
import json
import re
import sys
from pathlib import Path
from unittest import mock

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lib.inputs import data
from lib.inputs.data import (PARALLEL_TYPES, DataError, Task, drop_long, load_sft, load_tasks, parallel_type_of,
                             release_files)
from rewards import FactsJudge
from helpers import hub_cache
from tools import make_world
from tools.world import ENTITIES, KINDS, SERVERS, World

ROOT = Path(__file__).resolve().parent.parent
WORLD = ROOT / "data" / "world"

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "w", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
QUOTE = {"name": "get_quote", "description": "q", "parameters": {  # bare function form
    "type": "object", "properties": {"ticker": {"type": "string"}}, "required": ["ticker"]}}


def write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def verl_row(gold, **gt):
    return {
        "prompt": [{"role": "system", "content": "sys <tools>...</tools>"}, {"role": "user", "content": "Weather in Paris and Rome?"}],
        "tools": json.dumps([WEATHER, QUOTE]),
        "reward_model": {"style": "rule", "ground_truth": {
            "allowed_tools": ["get_weather", "get_quote"], "gold_tool_calls": gold,
            "question_content": "Weather in Paris and Rome?", "tool_schemas": "[]", "subset_name": "tool_call", **gt}},
        "extra_info": {"parallel_type": "multi_step_has_parallel", "tool_responses": [
            {"name": "get_weather", "arguments": {"city": "Paris"}, "response": "{\"temp\": 18}"},
            {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}", "response": {"temp": 25}}]},
    }


NESTED = json.dumps([[{"name": "get_weather", "arguments": {"city": "Paris"}},
                      {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}],
                     [{"name": "get_quote", "arguments": {"ticker": "ACME"}}]])


def toucan_row(**kw):
    messages = [
        {"role": "system", "content": "You are a helper."},
        {"role": "user", "content": "Weather in Paris and Rome, then ACME?"},
        {"role": "tool_call", "content": "{'name': 'get_weather', 'arguments': '{\"city\": \"Paris\"}'}"},
        {"role": "tool_call", "content": "{'name': 'get_weather', 'arguments': '{\"city\": \"Rome\"}'}"},
        {"role": "tool_response", "content": "18 C"},
        {"role": "tool_response", "content": "25 C"},
        {"role": "assistant", "content": "Now the stock."},
        {"role": "tool_call", "content": "{'name': 'get_quote', 'arguments': '{\"ticker\": \"ACME\"}'}"},
        {"role": "tool_response", "content": "12.5"},
        {"role": "assistant", "content": "Paris 18 C, Rome 25 C, ACME 12.5."},
        {"role": "user", "content": "And Oslo?"},  # a later turn: not part of this task's gold
        {"role": "tool_call", "content": "{'name': 'get_weather', 'arguments': '{\"city\": \"Oslo\"}'}"},
    ]
    return {"messages": json.dumps(messages), "tools": json.dumps([WEATHER, QUOTE]),
            "question": "Weather in Paris and Rome, then ACME?", "target_tools": "get_weather, get_quote",
            "subset_name": "single-turn-original", **kw}


def test_verl_nested_gold_responses_and_facts(tmp_path):
    p = write_jsonl(tmp_path / "rl.jsonl", [verl_row(NESTED, reference_facts=["18", "Rome"])])
    (t,) = load_tasks(p)
    assert t.gold == [[{"name": "get_weather", "arguments": {"city": "Paris"}},
                       {"name": "get_weather", "arguments": {"city": "Rome"}}],
                      [{"name": "get_quote", "arguments": {"ticker": "ACME"}}]]
    assert t.messages[1] == {"role": "user", "content": "Weather in Paris and Rome?"}
    assert [x["function"]["name"] for x in t.tools] == ["get_weather", "get_quote"]
    assert t.tools[1]["type"] == "function"  # the bare function dict got wrapped
    assert t.parallel_type == "multi_step_has_parallel" and t.subset == "tool_call"
    assert t.responses == [{"name": "get_weather", "arguments": {"city": "Paris"}, "response": "{\"temp\": 18}"},
                           {"name": "get_weather", "arguments": {"city": "Rome"}, "response": "{\"temp\": 25}"}]
    assert t.facts == ["18", "Rome"]
    assert (t.source, t.row) == (str(p), 1)


def test_verl_preview_flat_names(tmp_path):
    row = verl_row(["get_weather", "get_quote"])
    del row["extra_info"]
    del row["reward_model"]["ground_truth"]["allowed_tools"]
    (t,) = load_tasks(write_jsonl(tmp_path / "preview.jsonl", [row]))
    assert t.gold == [[{"name": "get_weather", "arguments": {}}, {"name": "get_quote", "arguments": {}}]]
    assert t.parallel_type == "single_step_parallel"  # derived from the gold
    assert t.allowed_tools == ["get_weather", "get_quote"]  # derived from the tools
    assert t.responses == [] and t.facts == []


def test_toucan_literal_calls_and_parallel_steps(tmp_path):
    (t,) = load_tasks(write_jsonl(tmp_path / "toucan.jsonl", [toucan_row()]))
    assert [m["role"] for m in t.messages] == ["system", "user"]
    assert t.gold == [[{"name": "get_weather", "arguments": {"city": "Paris"}},
                       {"name": "get_weather", "arguments": {"city": "Rome"}}],
                      [{"name": "get_quote", "arguments": {"ticker": "ACME"}}]]
    assert t.parallel_type == "multi_step_has_parallel" and t.subset == "tool_call"
    assert [(r["arguments"], r["response"]) for r in t.responses] == [
        ({"city": "Paris"}, "18 C"), ({"city": "Rome"}, "25 C"), ({"ticker": "ACME"}, "12.5")]
    assert t.allowed_tools == ["get_weather", "get_quote"]
    assert t.question == "Weather in Paris and Rome, then ACME?"


def test_toucan_available_tools_target_tools_and_irrelevant(tmp_path):
    row = toucan_row(subset_name="irrelevant")
    row["messages"] = json.dumps([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}])
    row["available_tools"] = []
    del row["tools"]
    (t,) = load_tasks(write_jsonl(tmp_path / "t.jsonl", [row]))
    assert t.gold == [] and t.subset == "irrelevant" and t.parallel_type == "irrelevant"
    assert t.allowed_tools == ["get_weather", "get_quote"]  # from the comma-separated target_tools


def test_toucan_literal_is_never_evaluated(tmp_path):
    row = toucan_row()
    msgs = json.loads(row["messages"])
    msgs[2]["content"] = "__import__('os').system('touch " + str(tmp_path / "pwned") + "')"
    row["messages"] = json.dumps(msgs)
    with pytest.raises(ValueError, match=r"row 1: field 'messages\[2\]\.content'"):
        load_tasks(write_jsonl(tmp_path / "t.jsonl", [row]))
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("bad, field", [
    (verl_row("[[{\"name\": "), "reward_model.ground_truth.gold_tool_calls"),
    (verl_row(NESTED, subset_name="maybe"), "reward_model.ground_truth.subset_name"),
    (verl_row(NESTED, reference_facts=[1.5]), "reward_model.ground_truth.reference_facts"),
    ({**verl_row(NESTED), "prompt": [{"role": "user", "content": 3}]}, "prompt[0].content"),
    ({**verl_row(NESTED), "extra_info": {"parallel_type": "sideways"}}, "extra_info.parallel_type"),
    ({**verl_row(NESTED), "extra_info": {"tool_responses": [{"name": "f", "arguments": "{x"}]}},
     "extra_info.tool_responses[0].arguments"),
    (toucan_row(messages="[{\"role\": \"user\""), "messages"),
    ({"foo": 1}, "<row>"),
    ("{not json", "<row>"),
])
def test_malformed_task_row_names_file_row_and_field(tmp_path, bad, field):
    p = write_jsonl(tmp_path / "x.jsonl", [verl_row(NESTED), bad])
    with pytest.raises(ValueError) as e:
        load_tasks(p)
    assert str(e.value).startswith(f"{p} row 2: field '{field}': ")


def test_skip_bad_skips_and_reports(tmp_path, capsys):
    p = write_jsonl(tmp_path / "x.jsonl", [verl_row(NESTED), verl_row("nope"), toucan_row(), "{bad"])
    tasks = load_tasks(p, skip_bad=True)
    assert [t.row for t in tasks] == [1, 3] and tasks.skipped == 2
    err = capsys.readouterr().err
    assert "skipped 2 bad row(s)" in err and "row 2: field 'reward_model.ground_truth.gold_tool_calls'" in err
    assert load_tasks(write_jsonl(tmp_path / "ok.jsonl", [verl_row(NESTED)]), skip_bad=True).skipped == 0


def test_json_array_file(tmp_path):
    p = tmp_path / "rows.json"
    p.write_text(json.dumps([verl_row(NESTED), toucan_row()]))
    assert [len(t.gold) for t in load_tasks(p)] == [2, 2]


def test_sft_conversations_and_messages(tmp_path):
    conv = {"conversations": [
        {"from": "system", "value": "sys"}, {"from": "human", "value": "Weather in Paris?"},
        {"from": "gpt", "value": "<tool_call>\n[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]\n</tool_call>"},
        {"from": "human", "value": "<tool_response>\n{\"temp\": 18}\n</tool_response>"},
        {"from": "gpt", "value": "It is 18 C in Paris."}]}
    msgs = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}
    chats = load_sft(write_jsonl(tmp_path / "sft.jsonl", [conv, msgs]))
    assert [m["role"] for m in chats[0]] == ["system", "user", "assistant", "user", "assistant"]
    assert chats[0][3]["content"] == "<tool_response>\n{\"temp\": 18}\n</tool_response>"  # verbatim
    assert chats[1] == msgs["messages"]
    bad = {"conversations": [{"from": "human", "value": "x"}, {"from": "robot", "value": "y"}]}
    p = write_jsonl(tmp_path / "bad.jsonl", [conv, bad])
    with pytest.raises(ValueError, match=re.escape(f"{p} row 2: field 'conversations[1].from'")):
        load_sft(p)
    assert load_sft(p, skip_bad=True).skipped == 1


def test_parquet_round_trip(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    rows = [json.loads(line) for line in (WORLD / "rl.jsonl").read_text().splitlines()[:60]]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "rl.parquet")
    write_jsonl(tmp_path / "rl.jsonl", rows)
    a, b = load_tasks(tmp_path / "rl.jsonl"), load_tasks(tmp_path / "rl.parquet")
    strip = lambda t: {**vars(t), "source": ""}  # noqa: E731
    assert len(a) == 60 and [strip(t) for t in a] == [strip(t) for t in b]


def test_parallel_type_of():
    c = {"name": "f", "arguments": {}}
    assert [parallel_type_of(g) for g in ([], [[c]], [[c, c]], [[c], [c]], [[c, c], [c]], [[c, c], [c, c]])] == [
        "irrelevant", "single_step_single_tool", "single_step_parallel", "multi_step_all_serial",
        "multi_step_has_parallel", "multi_step_all_parallel"]


# --- the shipped world --------------------------------------------------------------------

def run_make_world(monkeypatch, *args):
    """tools/make_world.py's command line, run in this process (a subprocess would spend
    seconds importing transformers again)."""
    monkeypatch.setattr(sys, "argv", ["make_world.py", *map(str, args)])
    make_world.main()


def test_generator_is_deterministic_for_a_seed(tmp_path, monkeypatch):
    def run(seed, out):
        run_make_world(monkeypatch, "--seed", seed, "--out", out, "--scale", "0.03")
        return {f: (out / f).read_bytes() for f in ("sft.jsonl", "rl.jsonl", "eval.jsonl")}
    a, b, c = run(0, tmp_path / "a"), run(0, tmp_path / "b"), run(1, tmp_path / "c")
    assert a == b
    assert all(a[f] != c[f] for f in a)  # the seed matters
    assert len(load_sft(tmp_path / "a" / "sft.jsonl")) == 60 and len(load_tasks(tmp_path / "a" / "rl.jsonl")) == 18


def test_shipped_files_are_the_generator_output(tmp_path, monkeypatch):
    run_make_world(monkeypatch, "--seed", 0, "--out", tmp_path)
    for f in ("sft.jsonl", "rl.jsonl", "eval.jsonl"):
        assert (tmp_path / f).read_bytes() == (WORLD / f).read_bytes(), f


@pytest.fixture(scope="module")
def world():
    return {n: load_tasks(WORLD / f"{n}.jsonl") for n in ("rl", "eval")} | {"sft": load_sft(WORLD / "sft.jsonl")}


def test_shipped_world_sizes_and_types(world):
    assert [len(world[n]) for n in ("sft", "rl", "eval")] == [make_world.SIZES[n] for n in ("sft", "rl", "eval")]
    for name in ("rl", "eval"):
        counts = collections.Counter(t.parallel_type for t in world[name])
        assert set(counts) == set(PARALLEL_TYPES), name
        assert 0.04 < counts["irrelevant"] / len(world[name]) < 0.16
    sizes = sum((WORLD / f"{n}.jsonl").stat().st_size for n in ("sft", "rl", "eval"))
    assert sizes < 10e6  # small enough to commit


def test_shipped_tasks_are_consistent(world):
    schemas = {}
    for t in world["rl"] + world["eval"]:
        names = [x["function"]["name"] for x in t.tools]
        assert len(names) == 4 and t.allowed_tools == names
        assert "<tools>" in t.messages[0]["content"] and t.messages[-1] == {"role": "user", "content": t.question}
        assert t.parallel_type == parallel_type_of(t.gold)
        assert (t.subset == "irrelevant") == (t.parallel_type == "irrelevant") == (not t.gold) == (not t.facts)
        for x in t.tools:
            if x["function"]["name"] not in schemas:
                schemas[x["function"]["name"]] = jsonschema.Draft202012Validator(x["function"]["parameters"])
        calls = [c for step in t.gold for c in step]
        for c in calls:  # every gold call is valid under its tool's schema
            assert c["name"] in names
            schemas[c["name"]].validate(c["arguments"])
        # every gold call has exactly one recorded response, in gold order
        assert [(r["name"], r["arguments"]) for r in t.responses] == [(c["name"], c["arguments"]) for c in calls]
        assert all(isinstance(json.loads(r["response"]), dict) for r in t.responses)
        # the summary's facts are values the tool results state
        said = " ".join(r["response"] for r in t.responses)
        assert all(f in said for f in t.facts), t.question
    assert len(schemas) == 16


def _scalars(x):
    if isinstance(x, dict):
        x = list(x.values())
    if isinstance(x, list):
        return [s for v in x for s in _scalars(v)]
    return [x]


def test_later_steps_use_earlier_results(world):
    """In every multi-step task, a later step passes on a value that an earlier step returned
    and that the question does not state (an id, a ticker, a price)."""
    n = 0
    for t in world["rl"] + world["eval"]:
        if len(t.gold) < 2:
            continue
        first = len(t.gold[0])
        returned = _scalars([json.loads(r["response"]) for r in t.responses[:first]])
        later = _scalars([c["arguments"] for step in t.gold[1:] for c in step])
        assert any(v in returned and str(v) not in t.question for v in later), t.question
        n += 1
    assert n > 250


def test_sft_trajectories_follow_the_format(world):
    for chat in world["sft"]:
        assert [m["role"] for m in chat[:2]] == ["system", "user"] and chat[-1]["role"] == "assistant"
        assert "<tool_call>" not in chat[-1]["content"]
        middle = chat[2:-1]
        assert [m["role"] for m in middle] == ["assistant", "user"] * (len(middle) // 2)
        for call_turn, obs_turn in zip(middle[::2], middle[1::2]):
            body = call_turn["content"]
            assert body.startswith("<tool_call>\n[") and body.endswith("]\n</tool_call>")
            calls = json.loads(body[len("<tool_call>\n"):-len("\n</tool_call>")])
            assert obs_turn["content"].count("<tool_response>\n") == len(calls)


def test_serial_teacher_splits_parallel_steps_and_changes_nothing_else():
    """A serial demonstration makes the same calls, in the same order, one per turn; the
    share is seeded per row; the RL and eval tasks do not depend on it."""
    exs = make_world.examples(0, 0.1)["sft"]
    rows = {share: make_world.generate(0, 0.1, share) for share in (0.0, make_world.SERIAL_SHARE, 1.0)}
    assert rows[0.0]["rl"] == rows[1.0]["rl"] and rows[0.0]["eval"] == rows[1.0]["eval"]

    def calls_per_turn(row):
        return [len(json.loads(t["value"][len("<tool_call>\n"):-len("\n</tool_call>")]))
                for t in row["conversations"] if t["from"] == "gpt" and t["value"].startswith("<tool_call>")]
    parallel = [i for i, ex in enumerate(exs) if any(len(step) > 1 for step in ex["steps"])]
    assert len(parallel) > 50
    for i in parallel:
        assert calls_per_turn(rows[0.0]["sft"][i]) == [len(step) for step in exs[i]["steps"]]
        assert calls_per_turn(rows[1.0]["sft"][i]) == [1] * sum(map(len, exs[i]["steps"]))
        assert rows[0.0]["sft"][i]["conversations"][-1] == rows[1.0]["sft"][i]["conversations"][-1]  # same answer
    serial = [calls_per_turn(rows[make_world.SERIAL_SHARE]["sft"][i]) == calls_per_turn(rows[1.0]["sft"][i])
              for i in parallel]
    assert abs(sum(serial) / len(serial) - make_world.SERIAL_SHARE) < 0.12


def test_summaries_state_every_fact():
    """Each generated answer states all its reference facts (the offline judge rates it 5)."""
    w, r, judge = World(3), __import__("random").Random(3), FactsJudge()
    for kind, (ptype, *_rest) in KINDS.items():
        for _ in range(5):
            ex = make_world.make_example(w, r, kind)
            if ptype == "irrelevant":
                assert ex["facts"] == [] and ex["steps"] == []
                continue
            assert ex["facts"] and judge.rate(ex["question"], ["x"], ex["answer"], ex["facts"]) == 5, kind
            wrong = judge.rate(ex["question"], ["x"], "I could not find anything useful.", ex["facts"])
            assert wrong == 1


def test_eval_holds_out_combinations_never_questions(world):
    """Eval asks only about (kind, entities) combos that training never asks about, and no
    eval question occurs in training; every entity and kind of eval is one that training
    covers (closed vocabularies: eval tests new combinations, not unseen strings)."""
    rows = {n: [json.loads(x) for x in (WORLD / f"{n}.jsonl").read_text().splitlines()] for n in ("rl", "eval")}
    combos = {n: {r["extra_info"]["combo"] for r in rows[n]} for n in rows}
    assert not combos["rl"] & combos["eval"] and len(combos["eval"]) >= 60
    train_q = {c[1]["content"] for c in world["sft"]} | {t.question for t in world["rl"]}
    assert not train_q & {t.question for t in world["eval"]}
    # SFT rows carry no combo: regenerate a slice of the examples behind the files
    ex = make_world.examples(0, 0.1)
    assert not {e["combo"] for e in ex["sft"] + ex["rl"]} & {e["combo"] for e in ex["eval"]}
    assert all(make_world.is_eval(0, e["combo"]) == (name == "eval") for name in ex for e in ex[name])
    # closed vocabularies: each entity an eval question names, training names as well
    train_text = " ".join(sorted(train_q))
    named = {e for c in combos["eval"] for e in c.split("|")[1:] if e in ENTITIES}
    assert named and all(e in train_text for e in named)
    assert {r["extra_info"]["kind"] for r in rows["eval"]} <= {r["extra_info"]["kind"] for r in rows["rl"]}


def test_train_questions_mostly_distinct(world):
    qs = [c[1]["content"] for c in world["sft"]] + [t.question for t in world["rl"]]
    assert len(set(qs)) > 0.7 * len(qs)


def test_demo_tokenizer_copies_ids_and_loads_as_built(world, tmp_path):
    """lib/training/tiny.py's tokenizer on the shipped world: each offered tool is one token, a name has
    one id in the question, the call and the tool response, and the folder train.py loads
    (AutoTokenizer gives Qwen2Tokenizer, which swaps in Qwen2.5's split) encodes as built."""
    from lib.training import tiny
    from transformers import AutoTokenizer
    tasks, convs = world["rl"][:100], world["sft"][:100]
    tiny.build(tmp_path, tiny.world_texts(tasks, convs), 0, (32, 1, 2))
    built, loaded = tiny.build_tokenizer(tiny.world_texts(tasks, convs)), AutoTokenizer.from_pretrained(tmp_path)
    for chat in convs[:20]:
        text = built.apply_chat_template(chat, tokenize=False)
        assert loaded(text)["input_ids"] == built(text)["input_ids"]
    system = convs[0][0]["content"]
    n_tools = system.count('{"type": "function"')
    assert len(built(system)["input_ids"]) < 80 and n_tools == 4
    ids = built(convs[0][0]["content"])["input_ids"]
    assert sum(len(built.decode([i])) > 100 for i in ids) == n_tools + 2  # and TOOLS_HEAD, TOOLS_TAIL
    paris = built("Paris")["input_ids"]
    assert len(paris) == 1
    for text in ("the weather in Paris?", '{"city": "Paris"}', '{"city":"Paris","temp":3}'):
        assert paris[0] in built(text)["input_ids"], text


def test_system_prompt_is_qwen_hermes_form():
    tools = SERVERS["weather"]
    s = make_world.system_prompt(tools)
    head, rest = s.split("\n\n# Tools\n\n", 1)
    assert "JSON list" in head and "<tool_call>" in head
    body = rest.split("<tools>\n", 1)[1].split("\n</tools>")[0]
    assert [json.loads(line) for line in body.split("\n")] == tools
    assert s.endswith("<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>")
    assert body.split("\n")[0] == json.dumps(tools[0])  # ", " and ": " separators, as Jinja's tojson


# --- the release's files and layouts ----------------------------------------------------------
# tests/fixtures/*.preview.jsonl: rows copied verbatim from the release (SLCA-GRPO/SLCA-GRPO at
# 68539c5, data/samples/): RL rows 1 and 5 (a tool call, an irrelevant question), SFT rows 1
# and 4 (a parallel step then two serial calls; one call). The eval split has the RL layout.
FIXTURES = ROOT / "tests" / "fixtures"
RL_PREVIEW = FIXTURES / "toucan_toolcall_rl.preview.jsonl"
SFT_PREVIEW = FIXTURES / "toucan_toolcall_sft.preview.jsonl"


def test_release_rl_preview_rows_load_as_tasks(tmp_path):
    a, b = load_tasks(RL_PREVIEW)
    assert a.gold == [[{"name": "think-tool-server-think", "arguments": {}}]]  # a flat list of names
    assert (a.subset, a.parallel_type, a.allowed_tools) == ("tool_call", "single_step_single_tool", ["think-tool-server-think"])
    assert [m["role"] for m in a.messages] == ["system", "user"] and "<tools>" in a.messages[0]["content"]
    assert a.question == a.messages[1]["content"] and a.question.startswith("I need to develop a detailed, step\u2011by\u2011step")
    assert (b.gold, b.subset, b.parallel_type, len(b.tools)) == ([], "irrelevant", "irrelevant", 4)
    assert b.allowed_tools[0] == "pok\u00e9mcp-random-pokemon"
    # the release ships these splits as parquet: the same rows from a parquet file (structs, lists)
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    rows = [json.loads(line) for line in RL_PREVIEW.read_text(encoding="utf-8").splitlines()]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "toucan_eval_4k_unified.parquet")
    strip = lambda t: {**vars(t), "source": ""}  # noqa: E731
    assert [strip(t) for t in load_tasks(tmp_path / "toucan_eval_4k_unified.parquet")] == [strip(a), strip(b)]


def tool_prompt(tools):
    from lib.inputs.chat import tools_prompt
    return tools_prompt(tools)


def test_release_sft_json_rows_load_as_chats_and_tasks(tmp_path):
    rows = [json.loads(line) for line in SFT_PREVIEW.read_text(encoding="utf-8").splitlines()]
    first, second = load_sft(SFT_PREVIEW)  # today's loader stopped at the first tool_call message
    tools = json.loads(rows[1]["tools"])
    msgs = json.loads(rows[1]["messages"])
    assert second == [
        {"role": "system", "content": tool_prompt(tools)},  # the row has no system message: its tools make one
        {"role": "user", "content": msgs[0]["content"]},
        {"role": "assistant", "content": msgs[1]["content"] + "\n<tool_call>\n" + json.dumps(
            [{"name": "flux-imagegen-server-generateImageUrl", "arguments": {
                "prompt": "A sleek wind turbine farm glistening under a bright sunrise", "enhance": True}}]) + "\n</tool_call>"},
        {"role": "user", "content": "<tool_response>\n" + msgs[3]["content"] + "\n</tool_response>"},
        {"role": "assistant", "content": msgs[4]["content"]}]
    # row 1: two tool_call messages in a row are one parallel step: one turn, one block, a list of two
    assert [m["role"] for m in first] == ["system", "user"] + ["assistant", "user"] * 3 + ["assistant"]
    step = first[2]["content"].split("<tool_call>\n")[1].split("\n</tool_call>")[0]
    assert [c["arguments"]["location"] for c in json.loads(step)] == ["42.3601,-71.0589", "41.8781,-87.6298"]
    assert first[3]["content"].count("<tool_response>\n") == 2 and first[3]["content"].endswith("</tool_response>")
    assert first[-1]["content"].startswith("## Cross-Country Bike Race Weather Summary")
    # --sft-turns release: LLaMA-Factory skips a row whose turns do not alternate; both preview
    # rows have a run of tool_call messages (row 1) or a text before a call (row 2), so both go
    alternating = {"messages": json.dumps([{"role": "user", "content": "q"}, {"role": "tool_call", "content": str(
        {"name": "f", "arguments": "{}"})}, {"role": "tool_response", "content": "r"}, {"role": "assistant", "content": "a"}]),
        "tools": rows[0]["tools"]}
    mixed = write_jsonl(tmp_path / "mixed.jsonl", rows + [alternating, {**alternating, "messages": json.dumps(
        json.loads(alternating["messages"])[:-1])}])                      # the last: ends on a tool response
    kept = load_sft(mixed, turns="release")
    assert kept == [load_sft(mixed)[2]] and kept.abnormal == 3 and load_sft(mixed).abnormal == 0
    with pytest.raises(DataError, match="no usable rows"):
        load_sft(SFT_PREVIEW, turns="release")
    # what the release's materialiser writes: one JSON array of {messages, tools} (the metadata
    # columns dropped); and `messages` already decoded to a list
    p = tmp_path / "toucan_toolcall_sft.json"
    p.write_text(json.dumps([{"messages": r["messages"], "tools": r["tools"]} for r in rows]), encoding="utf-8")
    assert load_sft(p) == [first, second]
    p = write_jsonl(tmp_path / "sft_lists.jsonl", [{**r, "messages": json.loads(r["messages"])} for r in rows])
    assert load_sft(p) == [first, second]
    # an SFT JSON row is a Toucan row too: it loads as a task
    t1, t2 = load_tasks(SFT_PREVIEW)
    assert [len(step) for step in t1.gold] == [2, 1, 1] and t1.parallel_type == "multi_step_has_parallel"
    assert t1.responses[2] == {"name": "advanced-calculator-server-add", "arguments": {"a": 70, "b": 72}, "response": "142"}
    assert (t2.question, t2.messages) == (rows[1]["question"], [msgs[0]])


def as_conversations(row):
    """An SFT JSON row written back in the layout of the release's raw SFT parquet: ShareGPT
    turns, the tools in the system turn, a gpt turn per text and per run of calls, a human
    turn per tool response (the inverse of the release's convert_sft_parquet_to_json.py)."""
    turns = [{"from": "system", "value": tool_prompt(json.loads(row["tools"]))}]
    for role, run in itertools.groupby(json.loads(row["messages"]), key=lambda m: m["role"]):
        run = list(run)
        if role == "tool_call":
            calls = [ast.literal_eval(m["content"]) for m in run]
            calls = [{"name": c["name"], "arguments": json.loads(c["arguments"])} for c in calls]
            turns.append({"from": "gpt", "value": "<tool_call>\n" + json.dumps(calls, ensure_ascii=False) + "\n</tool_call>"})
        for m in run if role != "tool_call" else []:
            frm = {"user": "human", "assistant": "gpt", "tool_response": "human"}[role]
            value = f"<tool_response>\n{m['content']}\n</tool_response>" if role == "tool_response" else m["content"]
            turns.append({"from": frm, "value": value})
    return {"conversations": turns}


def test_release_sft_parquet_layout_gives_the_same_chats(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    rows = [json.loads(line) for line in SFT_PREVIEW.read_text(encoding="utf-8").splitlines()]
    p = tmp_path / "toucan_toolcall_sft_split_42k.parquet"
    pq.write_table(pa.Table.from_pylist([as_conversations(r) for r in rows]), p)
    assert load_sft(p) == load_sft(SFT_PREVIEW)


@pytest.fixture
def offline_hub(tmp_path, monkeypatch):
    """The real hf_hub_download, offline, on a cache in tmp_path/hub that a test fills (helpers.hub_cache)."""
    from huggingface_hub import constants
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path / "hub"


def test_release_files_come_from_the_cache_in_the_hubs_layout(offline_hub):
    names = ["data/toucan_toolcall_rl.parquet", "data/toucan_eval_4k_unified.parquet",
             "data/toucan_toolcall_sft_split_42k.parquet"]
    hub_cache(offline_hub, "YanZhanPKU/SLCA-GRPO-Datasets", {n: n.encode() for n in names})
    paths = release_files()
    assert [open(paths[k], "rb").read() for k in ("rl", "eval", "sft")] == [n.encode() for n in names]
    assert all("/snapshots/" + "0" * 40 + "/data/" in p for p in paths.values())


def test_release_files_at_the_repository_root_are_not_the_release(offline_hub):
    # the repository keeps its splits under data/: a file at the root is not found as one
    hub_cache(offline_hub, "YanZhanPKU/SLCA-GRPO-Datasets", {"toucan_toolcall_rl.parquet": b"x",
                                                            "toucan_eval_4k_unified.parquet": b"x",
                                                            "toucan_toolcall_sft_split_42k.parquet": b"x"})
    with pytest.raises(DataError, match="data/toucan_toolcall_rl.parquet is not in"):
        release_files()


def test_release_files_offline_and_not_cached_is_one_clear_line(offline_hub):
    with pytest.raises(DataError) as e:
        release_files()
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("YanZhanPKU/SLCA-GRPO-Datasets/data/toucan_toolcall_rl.parquet is not in")
    assert 'fetch the splits with: hf download YanZhanPKU/SLCA-GRPO-Datasets --repo-type dataset --include ' \
           '"data/*.parquet" (into the Hugging Face cache' in msg
    assert "--data DIR/data/toucan_toolcall_rl.parquet --eval-data DIR/data/toucan_eval_4k_unified.parquet " \
           "--sft-data DIR/data/toucan_toolcall_sft_split_42k.parquet" in msg
    with mock.patch("huggingface_hub.hf_hub_download", side_effect=OSError("unreachable")):
        with pytest.raises(DataError, match=r"\(OSError\); fetch the splits with: hf download "):
            release_files()


def test_drop_long_drops_prompts_over_the_release_limit(tmp_path):
    big = verl_row(NESTED)
    big["prompt"][1]["content"] = "weather? " * 120_000  # a 1 MB row: it loads (no JSON limit hit) ...
    tasks = load_tasks(write_jsonl(tmp_path / "rl.jsonl", [verl_row(NESTED), big, verl_row(NESTED)]))
    assert data.MAX_PROMPT_TOKENS == 24_576

    def n_tokens(t):  # stands in for len(rollout.prompt_ids(tok, t))
        return sum(len(m["content"].split()) for m in t.messages)
    kept, dropped = drop_long(tasks, n_tokens)  # ... and is not kept as a 120,000-token prompt
    assert [t.row for t in kept] == [1, 3] and dropped == 1
    assert drop_long(tasks, n_tokens, max_tokens=n_tokens(tasks[0])) == ([tasks[0], tasks[2]], 1)  # the limit is kept
    assert drop_long(tasks, n_tokens, max_tokens=n_tokens(tasks[0]) - 1) == ([], 3)


# --- hostile files and rows -------------------------------------------------------------------

GOOD = json.dumps(verl_row(NESTED))
HOSTILE_ROWS = {  # line 2 of a file whose lines 1 and 3 are good
    "deep gold": json.dumps(verl_row("[" * 100_000 + "]" * 100_000)),
    "huge-integer gold": json.dumps(verl_row('[[{"name": "f", "arguments": {"x": ' + "9" * 5000 + "}}]]")),
    "huge integer in the row": GOOD[:-1] + ', "n": ' + "9" * 5000 + "}",
    "deep row": '{"prompt": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "deep Python-literal call": json.dumps(toucan_row(messages=json.dumps([
        {"role": "user", "content": "q"}, {"role": "tool_call", "content": "(" * 300 + ")" * 300}]))),
    "a set in a literal call": json.dumps(toucan_row(messages=json.dumps([
        {"role": "user", "content": "q"}, {"role": "tool_call", "content": "{'name': 'f', 'arguments': {1, 2}}"}]))),
    "a huge literal call": json.dumps(toucan_row(messages=json.dumps([
        {"role": "user", "content": "q"}, {"role": "tool_call", "content": "[" + "1," * 600_000 + "]"}]))),
    "not an object": "[1, 2]",
}


@pytest.mark.parametrize("name", HOSTILE_ROWS)
def test_hostile_row_names_file_and_row_and_can_be_skipped(tmp_path, name):
    p = tmp_path / "rl.jsonl"
    p.write_text(GOOD + "\n" + HOSTILE_ROWS[name] + "\n" + GOOD + "\n")
    with pytest.raises(DataError) as e:
        load_tasks(p)
    assert str(e.value).startswith(f"{p} row 2: ") and "\n" not in str(e.value)
    tasks = load_tasks(p, skip_bad=True)
    assert [t.row for t in tasks] == [1, 3] and tasks.skipped == 1


def test_bytes_that_are_not_utf8_are_that_rows_error(tmp_path):
    p = tmp_path / "rl.jsonl"
    p.write_bytes(GOOD.encode() + b"\n" + GOOD.replace("Paris", "P\xe9ris").encode("latin-1") + b"\n")
    with pytest.raises(DataError, match=re.escape(f"{p} row 2: field '<row>': not UTF-8 text (byte 0xE9 at character")):
        load_tasks(p)
    assert [t.row for t in load_tasks(p, skip_bad=True)] == [1]


def test_bom_line_separators_blank_lines_and_crlf(tmp_path):
    row = verl_row(NESTED)
    row["prompt"][1]["content"] = "Weather in Paris\u2028and Rome?"  # U+2028 inside a string: not a line break
    p = tmp_path / "rl.jsonl"
    p.write_bytes(b"\xef\xbb\xbf" + (json.dumps(row, ensure_ascii=False) + "\r\n\n   \r\n" + GOOD + "\n{bad\n").encode())
    with pytest.raises(DataError, match=re.escape(f"{p} row 5: field '<row>': not JSON")):  # blank lines count
        load_tasks(p)
    a, b = load_tasks(p, skip_bad=True)
    assert (a.row, b.row) == (1, 4) and a.messages[1]["content"] == "Weather in Paris\u2028and Rome?"  # the BOM row too


def test_a_file_without_usable_rows_is_one_line(tmp_path):
    p = tmp_path / "empty.jsonl"
    p.write_text("\n\n")
    with pytest.raises(DataError, match=re.escape(f"{p}: no usable rows (no rows)")):
        load_tasks(p, skip_bad=True)
    p = write_jsonl(tmp_path / "bad.jsonl", ["{bad", verl_row("nope")])
    with pytest.raises(DataError) as e:
        load_sft(p, skip_bad=True)
    assert str(e.value).startswith(f"{p}: no usable rows (all 2 rows bad; first: {p} row 1: ") and "\n" not in str(e.value)
    q = tmp_path / "empty.json"
    q.write_text(" [ ] ")
    with pytest.raises(DataError, match=re.escape(f"{q}: no usable rows (no rows)")):
        load_tasks(q)


def test_json_array_rows_are_numbered_and_skipped_one_by_one(tmp_path):
    deep = "[" * 100_000 + "]" * 100_000
    p = tmp_path / "rows.json"
    p.write_text(f"[{GOOD},\n {deep}, {GOOD}, " + '"x" ]')
    with pytest.raises(DataError, match=re.escape(f"{p} row 2: field '<row>': not JSON (JSON nested deeper than 64 levels)")):
        load_tasks(p)
    tasks = load_tasks(p, skip_bad=True)
    assert [t.row for t in tasks] == [1, 3] and tasks.skipped == 2  # row 4 is a string, not an object
    p.write_text(f"[{GOOD}, {GOOD}")
    with pytest.raises(DataError, match=re.escape(f"{p}: the JSON array is never closed (after 1 rows)")):
        load_tasks(p, skip_bad=True)
    p.write_text(f"[{GOOD}] x")
    with pytest.raises(DataError, match=re.escape(f"{p}: text after the JSON array's closing bracket")):
        load_tasks(p)


def test_row_size_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "MAX_ROW_CHARS", 1000)
    p = write_jsonl(tmp_path / "rl.jsonl", [verl_row(NESTED)])
    with pytest.raises(DataError, match=r"row 1: field '<row>': not JSON \(JSON text of \d+ characters exceeds the limit of 1000\)"):
        load_tasks(p)


@pytest.mark.parametrize("name, write, why", [
    ("missing.jsonl", None, "cannot read it"),
    ("rows.csv", "a,b\n", "expected a .parquet, .jsonl or .json file"),
    ("rows.parquet", "not parquet", "cannot read it as parquet"),
    ("missing.parquet", None, "cannot read it as parquet"),
])
def test_unreadable_files_are_one_line(tmp_path, name, write, why):
    p = tmp_path / name
    if write is not None:
        p.write_text(write)
    with pytest.raises(DataError) as e:
        load_tasks(p)
    assert str(e.value).startswith(f"{p}: {why}") and "\n" not in str(e.value)


# --- fuzz: random and hostile rows never raise anything but a DataError naming the row ---------

def _paths(x, at=()):
    """Every path into a JSON value (dict keys and list indexes)."""
    items = x.items() if isinstance(x, dict) else enumerate(x) if isinstance(x, list) else []
    for k, v in items:
        yield at + (k,)
        yield from _paths(v, at + (k,))


TEMPLATES = [verl_row(json.loads(NESTED), reference_facts=["18"]), toucan_row(messages=json.loads(toucan_row()["messages"])),
             {**toucan_row(), "tools": [WEATHER]}, json.loads(SFT_PREVIEW.read_text(encoding="utf-8").splitlines()[1]),
             {"conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "q"},
                                {"from": "gpt", "value": "a"}]}]
PATHS = [list(_paths(t)) for t in TEMPLATES]
HOSTILE_JSON = ["[" * 70 + "]" * 70, "[" * 3000 + "]" * 3000, "9" * 5000, "-" + "9" * 4400, "1e999999", "NaN",
                "null", "true", "0", "-1", "1.5", "{}", "[]", '""', '"\u2028"', '{"name": 1}', '[[]]', '[{}]',
                '[{"name": "f", "arguments": "[[["}]', '{"role": "tool_call", "content": "x"}', "{", "]", "'x'"]
HOSTILE_STR = ["(" * 300 + ")" * 300, "-" * 10_000 + "1", "~" * 5000 + "1", "{'name': 'f', 'arguments': {1, 2}}",
               "{'name': 'f', 'arguments': b'x'}", "{'name': 'f', 'arguments': '{\"x\": " + "9" * 5000 + "}'}",
               "[" * 150 + "]" * 150, "__import__('os').system('true')", "[{'name': 'f'}, 3]", "a, b", "[1]",
               "tool_call", "irrelevant", "<tool_call>[]</tool_call>"] + HOSTILE_JSON


def _mutated(k, mutations):
    row, subs = copy.deepcopy(TEMPLATES[k]), {}
    for j, (i, snippet, as_string) in enumerate(mutations):
        *parents, last = PATHS[k][i % len(PATHS[k])]
        try:
            node = functools.reduce(lambda x, key: x[key], parents, row)
            node[last] = f"@@{j}@@"
        except (KeyError, IndexError, TypeError):  # an earlier mutation replaced a parent
            continue
        subs[f'"@@{j}@@"'] = json.dumps(snippet) if as_string else snippet
    text = json.dumps(row, ensure_ascii=False)
    for key, value in subs.items():
        text = text.replace(key, value)
    return text.encode("utf-8", "surrogatepass")


# characters that matter to JSON, Python literals, line splitting and UTF-8 (a fixed alphabet: fast to draw)
chars = st.sampled_from(list('{}[]",:\\\' \t\r0123456789.eE+-nultrfasNI\x00\x1c\x7f\u00e9\u2011\u2028\ufeff\U0001f4c3'))
text = st.text(chars, max_size=12)
snippets = st.one_of(st.sampled_from(HOSTILE_JSON), text, text.map(json.dumps), st.integers().map(str),
                     st.floats().map(json.dumps))
row_lines = st.builds(_mutated, st.integers(0, len(TEMPLATES) - 1), st.lists(st.tuples(
    st.integers(0, 10**6), st.one_of(snippets, st.sampled_from(HOSTILE_STR)), st.booleans()), max_size=3))
other_lines = st.one_of(st.binary(max_size=30), text.map(str.encode),
                        st.sampled_from([b"", b"  ", b"\r", b"\t", "\u2028".encode(), b"\xef\xbb\xbf"]))
files = st.tuples(st.booleans(), st.lists(st.one_of(row_lines, row_lines, other_lines), min_size=10, max_size=30))


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


def _check(load, p, rows):
    """`load` on p: every row loaded, or a DataError naming a row that exists; with skip_bad
    every row loaded or counted, or the one-line "no usable rows"."""
    try:
        out = load(p)
        assert len(out) == len(rows) and (not out or not isinstance(out[0], Task) or [t.row for t in out] == rows)
    except DataError as e:
        m = re.match(re.escape(str(p)) + r"( row (\d+): |: no usable rows )", str(e))
        assert m and "\n" not in str(e), str(e)
        assert int(m.group(2)) in rows if m.group(2) else not rows
    try:
        out = load(p, skip_bad=True)
        assert len(out) + out.skipped == len(rows) and out
    except DataError as e:
        assert str(e).startswith(f"{p}: no usable rows (") and "\n" not in str(e), str(e)


@settings(max_examples=500, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(files)
def test_fuzz_rows_load_or_fail_naming_the_row(fuzz_dir, file):
    """10,000 random and hostile rows (500 files of 10 to 30), through both loaders, as JSON
    lines and as a JSON array."""
    bom, lines = file
    body = (b"\xef\xbb\xbf" if bom else b"") + b"\n".join(x.replace(b"\n", b" ") for x in lines) + b"\n"
    p = fuzz_dir / "rows.jsonl"
    p.write_bytes(body)
    text = body.decode("utf-8-sig", "surrogateescape").split("\n")
    rows = [i for i, line in enumerate(text, start=1) if line.strip(" \t\r")]
    for load in (load_tasks, load_sft):
        _check(load, p, rows)
    q = fuzz_dir / "rows.json"  # the same rows as one JSON array: rows load, or a one-line error naming the file
    q.write_bytes(b"[" + b",".join(x.replace(b"\n", b" ") for x in lines if x.strip(b" \t\r")) + b"]")
    for load, skip in ((load_tasks, False), (load_sft, True)):
        try:
            load(q, skip_bad=skip)
        except DataError as e:
            assert str(e).startswith(f"{q}") and "\n" not in str(e), str(e)


def bonus_worlds(tmp_path):
    """The diagnostic world at K = 0, 1, 2 (and off), a small scale, loaded back as tasks."""
    out = {}
    for k in (None, 0, 1, 2):
        rows = make_world.generate(0, 0.25, bonus_k=k)
        out[k] = rows | {n: load_tasks(write_jsonl(tmp_path / f"{n}-{k}.jsonl", rows[n])) for n in ("rl", "eval")}
    return out


def test_bonus_world_marks_its_kinds_and_changes_nothing_else(tmp_path):
    """--bonus K: the bonus kinds' rows (about 15% of RL and eval) name the extra call and record
    its answer, K of its values join the facts, gold and questions do not move; the SFT data is
    one for every K, and about BONUS_SHARE of the bonus kinds' demonstrations make the call."""
    w = bonus_worlds(tmp_path)
    assert w[0]["sft"] == w[1]["sft"] == w[2]["sft"]
    for n in ("rl", "eval"):
        off, marked = w[None][n], [t for t in w[1][n] if t.bonus]
        assert not any(t.bonus for t in off)
        assert 0.08 < len(marked) / len(off) < 0.25, n
        for k in (0, 1, 2):
            for a, b in zip(off, w[k][n]):
                assert (a.gold, a.question, a.messages, a.tools) == (b.gold, b.question, b.messages, b.tools)
                if b.bonus:
                    assert b.bonus not in {c["name"] for step in b.gold for c in step}  # not a gold call
                    assert len(b.facts) == len(a.facts) + k and b.facts[:len(a.facts)] == a.facts
                    assert b.responses[:-1] == a.responses and b.responses[-1]["name"] == b.bonus
                else:
                    assert b.facts == a.facts and b.responses == a.responses
    kinds = [ex["kind"] in make_world.BONUS for ex in make_world.examples(0, 0.25)["sft"]]
    made = [any('"name": "%s"' % n in t["value"] for t in row["conversations"] if t["from"] == "gpt"
                for n in ("product_info", "hotel_info", "flight_info"))
            for row, bonus_kind in zip(w[1]["sft"], kinds) if bonus_kind]
    changed = [a != b for a, b, bonus_kind in zip(w[None]["sft"], w[1]["sft"], kinds)]
    assert sum(changed) == sum(made) and abs(sum(made) / len(made) - make_world.BONUS_SHARE) < 0.12


def test_bonus_call_costs_process_and_pays_summary_with_the_real_scorer(tmp_path):
    """The arithmetic the diagnostic rests on (Eqs. 2-4, the facts judge): on a marked task the
    extra call costs S_process its Name F1 share (0.05-0.09), and stating its values gains S_sum
    0.25-0.5 at K = 1 and nothing at K = 0; so under K = 1 the total score prefers the call and
    under K = 0 it does not. (At K = 2 a stock count can equal a price the summary already
    states, so a few rows gain one level less.)"""
    import rewards
    w, judge = bonus_worlds(tmp_path), FactsJudge()
    for k, (lo, hi) in ((0, (0.0, 0.0)), (1, (0.25, 0.5)), (2, (0.25, 0.75))):
        for t in [t for t in w[k]["rl"] if t.bonus]:
            blocks = "".join("<tool_call>\n" + json.dumps(step) + "\n</tool_call>" for step in t.gold)
            extra = t.responses[-1]
            call = "<tool_call>\n" + json.dumps([{"name": extra["name"], "arguments": extra["arguments"]}]) + "\n</tool_call>"
            bodies = [r["response"] for r in t.responses]
            plain = " ".join(t.facts[:len(t.facts) - k]) + " were found."
            fuller = plain + " Also " + " ".join(map(str, json.loads(extra["response"]).values()))  # its values
            s0 = rewards.score(blocks + plain, plain, bodies[:-1], t, judge)
            s1 = rewards.score(blocks + call + fuller, fuller, bodies, t, judge)
            cost, got = s0["process"] - s1["process"], s1["summary"] - s0["summary"]
            assert 0.05 - 1e-9 <= cost <= 0.09, (t.question, cost)
            assert lo - 1e-9 <= got <= hi + 1e-9, (k, t.question, got)
            assert (s1["score"] > s0["score"]) == (k > 0)


def test_wrong_world_marks_the_free_argument_kinds_and_its_reference_pays_the_wrong_call(tmp_path):
    """--wrong K: the WRONG kinds' rows name the call and its wrong arguments and record its
    answer; K = 1 swaps the facts for the wrong response's; gold and questions do not move; the
    SFT data is one for both K, about BONUS_SHARE of those kinds' demonstrations use the wrong
    argument. With the real scorer the wrong call costs S_process (the value share) and, at
    K = 1 only, stating what it answers raises S_sum, so the total score prefers it."""
    import rewards
    w = {k: make_world.generate(0, 0.25, wrong_k=k) for k in (None, 0, 1)}
    t = {k: load_tasks(write_jsonl(tmp_path / f"rl-{k}.jsonl", w[k]["rl"])) for k in w}
    assert w[0]["sft"] == w[1]["sft"] and w[None]["rl"] == make_world.generate(0, 0.25)["rl"]
    marked = [(a, b, c) for a, b, c in zip(t[None], t[0], t[1]) if b.bonus]
    assert 0.04 < len(marked) / len(t[None]) < 0.2 and not any(x.bonus for x in t[None])
    judge = FactsJudge()
    for a, b, c in marked:
        assert (a.gold, a.question) == (c.gold, c.question) and b.facts == a.facts and c.facts != a.facts
        bad = c.responses[-1]
        assert c.responses[:-1] == a.responses and bad["name"] == c.bonus == a.gold[0][0]["name"]
        assert c.bonus_args and all(bad["arguments"][k] == v != a.gold[0][0]["arguments"][k] for k, v in c.bonus_args.items())
        right = "<tool_call>\n" + json.dumps(a.gold[0]) + "\n</tool_call>"
        wrong = "<tool_call>\n" + json.dumps([{"name": bad["name"], "arguments": bad["arguments"]}]) + "\n</tool_call>"
        said_right, said_wrong = " ".join(a.facts) + " were found.", " ".join(c.facts) + " were found."
        s0 = rewards.score(right + said_right, said_right, [a.responses[0]["response"]], c, judge)
        s1 = rewards.score(wrong + said_wrong, said_wrong, [bad["response"]], c, judge)
        assert 0.05 < s0["process"] - s1["process"] < 0.2 and s1["summary"] - s0["summary"] >= 0.25
        assert s1["score"] > s0["score"]
        z0 = rewards.score(right + said_right, said_right, [a.responses[0]["response"]], b, judge)
        z1 = rewards.score(wrong + said_wrong, said_wrong, [bad["response"]], b, judge)
        assert z0["score"] > z1["score"]  # K = 0: the reference is the gold's, so the total prefers it
    kinds = [ex["kind"] in make_world.WRONG for ex in make_world.examples(0, 0.25)["sft"]]
    changed = [x != y for x, y, k in zip(w[None]["sft"], w[1]["sft"], kinds) if k]
    assert not any(x != y for x, y, k in zip(w[None]["sft"], w[1]["sft"], kinds) if not k)
    assert abs(sum(changed) / len(changed) - make_world.BONUS_SHARE) < 0.15
