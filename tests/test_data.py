"""data.py loaders on every layout (good and malformed rows) and the shipped tool world."""
import collections
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from data import PARALLEL_TYPES, Task, load_sft, load_tasks, parallel_type_of
from rewards import FactsJudge

ROOT = Path(__file__).resolve().parent.parent
WORLD = ROOT / "data" / "world"
spec = importlib.util.spec_from_file_location("make_world", ROOT / "data" / "make_world.py")
make_world = importlib.util.module_from_spec(spec)
spec.loader.exec_module(make_world)

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
    assert (t.source, t.row) == (str(p), 0)


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
    with pytest.raises(ValueError, match=r"row 0: field 'messages\[2\]\.content'"):
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
    ("{not json", "<line>"),
])
def test_malformed_task_row_names_file_row_and_field(tmp_path, bad, field):
    p = write_jsonl(tmp_path / "x.jsonl", [verl_row(NESTED), bad])
    with pytest.raises(ValueError) as e:
        load_tasks(p)
    assert str(e.value).startswith(f"{p} row 1: field '{field}': ")


def test_skip_bad_skips_and_reports(tmp_path, capsys):
    p = write_jsonl(tmp_path / "x.jsonl", [verl_row(NESTED), verl_row("nope"), toucan_row(), "{bad"])
    tasks = load_tasks(p, skip_bad=True)
    assert [t.row for t in tasks] == [0, 2] and tasks.skipped == 2
    err = capsys.readouterr().err
    assert "skipped 2 bad row(s)" in err and "row 1: field 'reward_model.ground_truth.gold_tool_calls'" in err
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
    with pytest.raises(ValueError, match=re.escape(f"{p} row 1: field 'conversations[1].from'")):
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

def test_generator_is_deterministic_for_a_seed(tmp_path):
    def run(seed, out):
        subprocess.run([sys.executable, str(ROOT / "data" / "make_world.py"), "--seed", str(seed),
                        "--out", str(out), "--scale", "0.03"], check=True, capture_output=True)
        return {f: (out / f).read_bytes() for f in ("sft.jsonl", "rl.jsonl", "eval.jsonl")}
    a, b, c = run(0, tmp_path / "a"), run(0, tmp_path / "b"), run(1, tmp_path / "c")
    assert a == b
    assert all(a[f] != c[f] for f in a)  # the seed matters
    assert len(load_sft(tmp_path / "a" / "sft.jsonl")) == 60 and len(load_tasks(tmp_path / "a" / "rl.jsonl")) == 30


def test_shipped_files_are_the_generator_output(tmp_path):
    subprocess.run([sys.executable, str(ROOT / "data" / "make_world.py"), "--seed", "0", "--out", str(tmp_path)],
                   check=True, capture_output=True)
    for f in ("sft.jsonl", "rl.jsonl", "eval.jsonl"):
        assert (tmp_path / f).read_bytes() == (WORLD / f).read_bytes(), f


@pytest.fixture(scope="module")
def world():
    return {n: load_tasks(WORLD / f"{n}.jsonl") for n in ("rl", "eval")} | {"sft": load_sft(WORLD / "sft.jsonl")}


def test_shipped_world_sizes_and_types(world):
    assert len(world["sft"]) >= 1800 and len(world["rl"]) >= 900 and len(world["eval"]) >= 180
    for name in ("rl", "eval"):
        counts = collections.Counter(t.parallel_type for t in world[name])
        assert set(counts) == set(PARALLEL_TYPES), name
        assert 0.04 < counts["irrelevant"] / len(world[name]) < 0.16
    sizes = sum((WORLD / f"{n}.jsonl").stat().st_size for n in ("sft", "rl", "eval"))
    assert sizes < 16e6  # small enough to commit


def test_shipped_tasks_are_consistent(world):
    schemas = {}
    for t in world["rl"] + world["eval"]:
        names = [x["function"]["name"] for x in t.tools]
        assert 3 <= len(names) <= 4 and t.allowed_tools == names
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
    assert len(schemas) >= 12


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
    assert n > 500


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


def test_summaries_state_every_fact():
    """Each generated answer states all its reference facts (the offline judge rates it 5)."""
    w, r, judge = make_world.World(3), __import__("random").Random(3), FactsJudge()
    for kind, (ptype, *_rest) in make_world.KINDS.items():
        for split in ("train", "eval"):
            for _ in range(5):
                ex = make_world.make_example(w, r, split, kind)
                if ptype == "irrelevant":
                    assert ex["facts"] == [] and ex["steps"] == []
                    continue
                assert ex["facts"] and judge.rate(ex["question"], ["x"], ex["answer"], ex["facts"]) == 5, kind
                wrong = judge.rate(ex["question"], ["x"], "I could not find anything useful.", ex["facts"])
                assert wrong == 1


def _entities(pool):
    names = pool.cities + [c for pair in pool.companies for c in pair] + pool.products + pool.coupons + pool.words
    return sorted(names, key=len, reverse=True)  # longest first, for masking


def test_eval_is_disjoint_from_train(world):
    train_e, eval_e = _entities(make_world.POOLS["train"]), _entities(make_world.POOLS["eval"])
    assert not set(train_e) & set(eval_e)
    train_text = [c[1]["content"] for c in world["sft"]] + [t.question + json.dumps(t.gold) for t in world["rl"]]
    eval_text = [t.question + json.dumps(t.gold) for t in world["eval"]]

    def mentions(texts, names):
        rx = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b", re.IGNORECASE)
        return {m for x in texts for m in rx.findall(x)}
    assert mentions(eval_text, train_e) == set()
    assert mentions(train_text, eval_e) == set()
    assert len(mentions(eval_text, eval_e)) >= 10  # the check above can see entities at all

    rx = re.compile(r"\b(" + "|".join(map(re.escape, train_e + eval_e)) + r")\b", re.IGNORECASE)

    def skeleton(q):  # the question with entities and numbers masked: its paraphrase template
        return re.sub(r"\d+(-\d+)*", "<n>", rx.sub("<e>", q))
    train_sk = {skeleton(c[1]["content"]) for c in world["sft"]} | {skeleton(t.question) for t in world["rl"]}
    eval_sk = {skeleton(t.question) for t in world["eval"]}
    assert len(eval_sk) >= 20 and not train_sk & eval_sk


def test_train_questions_are_distinct(world):
    qs = [c[1]["content"] for c in world["sft"]] + [t.question for t in world["rl"]]
    assert len(set(qs)) == len(qs)


def test_system_prompt_is_qwen_hermes_form():
    tools = make_world.SERVERS["weather"]
    s = make_world.system_prompt(tools)
    head, rest = s.split("\n\n# Tools\n\n", 1)
    assert "JSON list" in head and "<tool_call>" in head
    body = rest.split("<tools>\n", 1)[1].split("\n</tools>")[0]
    assert [json.loads(line) for line in body.split("\n")] == tools
    assert s.endswith("<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>")
    assert body.split("\n")[0] == json.dumps(tools[0])  # ", " and ": " separators, as Jinja's tojson
