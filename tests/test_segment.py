"""segment.py: masks from the response mask (docs/method.md §1) and the call parser."""
import re

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from helpers import MB, linear
from segment import Call, find_blocks, parse_block, segment_masks, strip_think



def masks_loop(row):
    """Reference: walk one row, collect runs, the last run is the summary."""
    runs, start = [], None
    for t, v in enumerate(row + [0]):
        if v and start is None:
            start = t
        if not v and start is not None:
            runs.append((start, t))
            start = None
    tool, summ = [0] * len(row), [0] * len(row)
    for i, (a, b) in enumerate(runs):
        for t in range(a, b):
            (summ if i == len(runs) - 1 else tool)[t] = 1
    return tool, summ


def test_runs_cases():
    m = torch.tensor([[0, 0, 0, 0, 0, 0],    # 0 runs
                      [0, 1, 1, 1, 0, 0],    # 1 run: summary only
                      [0, 1, 0, 1, 1, 0],    # 2 runs
                      [1, 0, 1, 0, 1, 1]])   # 3 runs
    tool, summ, tp, sp = segment_masks(m)
    assert tool.tolist() == [[0] * 6, [0] * 6, [0, 1, 0, 0, 0, 0], [1, 0, 1, 0, 0, 0]]
    assert summ.tolist() == [[0] * 6, [0, 1, 1, 1, 0, 0], [0, 0, 0, 1, 1, 0], [0, 0, 0, 0, 1, 1]]
    assert tp.tolist() == [False, False, True, True]
    assert sp.tolist() == [False, True, True, True]
    assert tool.dtype == m.dtype


def test_masks_match_loop_and_partition():
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        m = (torch.rand(7, 13, generator=g) < 0.6).float()
        tool, summ, tp, sp = segment_masks(m)
        assert torch.equal(tool + summ, m)
        for b in range(m.shape[0]):
            t, s = masks_loop([int(v) for v in m[b].tolist()])
            assert tool[b].tolist() == t and summ[b].tolist() == s
        assert torch.equal(tp, tool.bool().any(1)) and torch.equal(sp, summ.bool().any(1))


def test_truncated_trajectory_last_tool_turn_counts_as_summary():
    # prompt | call turn | observation | call turn cut by the cap (no summary turn)
    m = torch.tensor([[0, 0, 1, 1, 0, 0, 1, 1, 1]])
    tool, summ, _, _ = segment_masks(m)
    assert tool.tolist() == [[0, 0, 1, 1, 0, 0, 0, 0, 0]]
    assert summ.tolist() == [[0, 0, 0, 0, 0, 0, 1, 1, 1]]  # the released code's behaviour, kept


def test_strip_think():
    s = "<think>call <tool_call>x</tool_call></think>a<thinking>\nb\n</thinking>c"
    assert strip_think(s) == "ac"
    # the release's pattern pairs the tags freely and stops at the FIRST closing tag
    assert strip_think("<think>a</thinking>b<thinking>c</think>d") == "bd"
    assert strip_think("<think>x<thinking>y</thinking>z</think>w") == "z</think>w"
    # unclosed: the rest stays; a tag that is not exactly <think> or <thinking> is text
    assert strip_think("a<think>b<tool_call>") == "a<think>b<tool_call>"
    assert strip_think("<thinker>a</think>b<think >c</think>") == "<thinker>a</think>b<think >c</think>"


def test_find_blocks():
    text = 'a<tool_call>{"name": "f"}</tool_call> b <tool_call>[1]</tool_call><tool_call>open'
    assert find_blocks(text) == ['{"name": "f"}', "[1]"]


def test_parse_block_forms():
    assert parse_block('{"name": "f", "arguments": {"x": 1}}') == [Call("f", {"x": 1})]
    assert parse_block('[{"name": "f"}, {"name": "g", "parameters": {"y": 2}}]') == \
        [Call("f", {}), Call("g", {"y": 2})]
    assert parse_block('{"name": "f", "arguments": "{\\"x\\": 1}"}') == [Call("f", {"x": 1})]
    assert parse_block("[]") == []
    # arguments or parameters or {}: null, "", [] and {} fall through (the release's Python `or`)
    for empty in ("null", '""', "[]", "{}", "0", "false"):
        assert parse_block('{"name": "f", "arguments": %s, "parameters": {"y": 2}}' % empty,
                           string_args=False) == [Call("f", {"y": 2})]
        assert parse_block('{"name": "f", "arguments": %s}' % empty, string_args=False) == [Call("f", {})]


def test_parse_block_errors_never_raise():
    c, = parse_block("{not json")
    assert c.error.startswith("Invalid tool call format - ")
    c, = parse_block("3")
    assert "JSON object or list" in c.error
    c, = parse_block('{"arguments": {}}')
    assert "name" in c.error
    c, = parse_block('{"name": "f", "arguments": "{bad"}')
    assert c.name == "f" and c.error.startswith("Invalid tool arguments format - ")
    c, = parse_block('{"name": "f", "arguments": [1]}')
    assert c.error.startswith("Invalid tool arguments format - ")
    c, = parse_block('{"name": "f", "arguments": "{}"}', string_args=False)
    assert c.error.startswith("Invalid tool arguments format - ")


def test_parse_block_hostile_json_is_an_error():
    # '[' * 1000 used to raise RecursionError, a 5,000-digit integer ValueError
    c, = parse_block("[" * 1000)
    assert c.error.startswith("Invalid tool call format - ")
    c, = parse_block('{"name": "f", "arguments": {"a": %s}}' % ("7" * 5000))
    assert c.error.startswith("Invalid tool call format - ")
    c, = parse_block('{"name": "f", "arguments": "[' + "[" * 1000 + '"}')
    assert c.name == "f" and c.error.startswith("Invalid tool arguments format - ")
    c, = parse_block('{"name": "f", "arguments": "%s"}' % ("7" * 5000))
    assert c.error.startswith("Invalid tool arguments format - ")


def test_megabyte_inputs_are_linear():
    assert linear(find_blocks, lambda n: ["<tool_call>" * (n // 50)]) == []  # the old regex: 15 s at 4n, quadratic
    assert linear(find_blocks, lambda n: ["<tool_call>" * (n // 11)]) == []
    assert len(linear(find_blocks, lambda n: ["<tool_call>x</tool_call>" * (n // 24)])) == MB // 24
    assert linear(strip_think, lambda n: ["<think>" * (n // 50)]) == "<think>" * (MB // 50)  # the old regex: 25 s at 4n
    assert linear(strip_think, lambda n: ["<think>" * (n // 7)]) == "<think>" * (MB // 7)
    assert linear(strip_think, lambda n: ["<think>" + "x" * n]) == "<think>" + "x" * MB
    assert linear(strip_think, lambda n: ["<think>a</thinking>" * (n // 19)]) == ""
    assert linear(strip_think, lambda n: ["</think><thinkX" * (n // 15)]) == "</think><thinkX" * (MB // 15)
    for body in [lambda n: "[" * n, lambda n: "{" * n, lambda n: "7" * n, lambda n: '"' + "a" * n,
                 lambda n: "[1," * (n // 3) + "1]", lambda n: " " * n]:
        c, = linear(parse_block, lambda n: [body(n)])
        assert c.error
    calls = linear(parse_block, lambda n: ["[" + ",".join(['{"name": "f", "arguments": {"a": 1}}'] * (n // 40)) + "]"])
    assert len(calls) == MB // 40 and not any(c.error for c in calls)


# Hostile text: bytes index into tag soup (Hermes tags, think tags of both kinds, special tokens,
# JSON punctuation, huge and odd numbers, deep brackets, unicode incl. a lone surrogate, NUL).
SOUP = ["<tool_call>", "</tool_call>", "<think>", "</think>", "<thinking>", "</thinking>", "<think", "</think",
        "ing>", ">", "<", "[", "]", "{", "}", '"', ":", ",", "\\", " ", "\n", '"name"', '"arguments"',
        '"parameters"', '"f"', '"g"', '"a"', "null", "[]", "{}", "1", "0", "9" * 5000, "-0.5e3", "1e400", "true",
        "NaN", "Infinity", "<|im_end|>", "<|im_start|>", "<|endoftext|>", "é", "🙂", "\x00", "\ud800", "[" * 100,
        "]" * 100, '{"name": "f", "arguments": {"a": 1}}', '{"name": "g", "parameters": {"a": "1"}}',
        '{"name": "f", "arguments": null}', '{"name": "f", "arguments": "{}"}', '[{"name": "f"}, {"name": "g"}]', "x"]
soup = st.binary(max_size=48).map(lambda b: "".join(SOUP[i % len(SOUP)] for i in b))
FUZZ = settings(max_examples=3_000, deadline=None, database=None, suppress_health_check=list(HealthCheck))
THINK = re.compile(r"<think(?:ing)?>(.*?)</think(?:ing)?>", re.DOTALL)  # the release's patterns
BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


@pytest.mark.slow
@FUZZ
@given(soup)
def test_text_helpers_fuzz(text):
    """strip_think and find_blocks equal the release's regexes; parse_block never raises."""
    assert strip_think(text) == THINK.sub("", text)
    bodies = find_blocks(text)
    assert bodies == BLOCK.findall(text)
    for body in bodies + [text]:
        for string_args in (True, False):
            calls = parse_block(body, string_args)
            assert isinstance(calls, list)
            for c in calls:
                assert isinstance(c, Call) and isinstance(c.error, str)
                assert c.error or (isinstance(c.name, str) and c.name and isinstance(c.arguments, dict))


def test_drop_blocks_equals_the_regex_and_is_linear():
    from segment import drop_blocks
    pattern = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
    for t in ["a<tool_call>x</tool_call>b<tool_call>y", "<tool_call><tool_call>1</tool_call></tool_call>", "",
              "</tool_call><tool_call>", "x<tool_call></tool_call>y"]:
        assert drop_blocks(t) == pattern.sub("", t)
    assert linear(drop_blocks, lambda n: ["<tool_call>" * (n // 11)]) == "<tool_call>" * (MB // 11)



def test_json_depth_bound_can_be_raised_and_deep_values_survive_the_pipeline():
    import dataclasses
    import json
    import threading
    from types import SimpleNamespace

    import rewards
    import lib.inputs.text
    from simulator import Simulator

    def call(depth):  # a call whose JSON nests `depth` levels: {"arguments": {"a": [[...]]}}
        inner = "[" * (depth - 2) + "1" + "]" * (depth - 2)
        return '<tool_call>{"name": "f", "arguments": {"a": %s}}</tool_call>' % inner
    task = SimpleNamespace(tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
                           allowed_tools=["f"], responses=[], gold=[[{"name": "f", "arguments": {}}]],
                           question="q", facts=None)
    score = lambda text: rewards.score(text, "", [], task, rewards.FactsJudge())["format"]  # noqa: E731
    assert score(call(64)) == 1.0 and score(call(65)) == 0.0     # the default bound
    seen = []

    def run():  # a worker thread, as score_rollouts runs it; the rollout keeps asdict of each call
        for text in (call(200), call(lib.inputs.text.MAX_SAFE_DEPTH)):
            [(calls, _)] = Simulator(schema_check="full").respond([text], [task])
            seen.append((score(text), calls[0].error, len(json.dumps(dataclasses.asdict(calls[0]))) > 0))
        try:
            lib.inputs.text.loads("[" * 5000)
        except ValueError as e:
            seen.append(str(e))
    try:
        lib.inputs.text.set_json_depth(lib.inputs.text.MAX_SAFE_DEPTH)
        t = threading.Thread(target=run)
        t.start()
        t.join()
    finally:
        lib.inputs.text.set_json_depth(lib.inputs.text.MAX_JSON_DEPTH)
    assert seen == [(1.0, "", True), (1.0, "", True), f"JSON nested deeper than {lib.inputs.text.MAX_SAFE_DEPTH} levels"]
    for bad in (0, lib.inputs.text.MAX_SAFE_DEPTH + 1):
        with pytest.raises(ValueError, match="1..256"):
            lib.inputs.text.set_json_depth(bad)


# --------------------------------------------------------------------------------------------
# the decision tokens of README Eq. 15 (segment.decision_mask)
# --------------------------------------------------------------------------------------------
from segment import DECISION_WINDOW, decision_mask  # noqa: E402

PIECES = {0: "obs", 1: "<tool_call>", 2: "{}", 3: "</tool_call>", 4: "The", 5: " answer", 6: "<", 7: "tool",
          8: "_call>", 9: "b", 10: "\n", 11: ""}


def pieces(ids):
    return "".join(PIECES[i] for i in ids)


def test_decision_is_where_the_summary_turn_leaves_the_opener():
    ids = torch.tensor([[1, 2, 3, 0, 0, 4, 5, 5],      # one-token opener, answer opens with "The": 1 token
                        [1, 2, 3, 0, 0, 6, 9, 5],      # '<' then 'b': '<' is the opener's too, 'b' departs: 2
                        [6, 7, 8, 2, 3, 0, 10, 4],     # a call spelled in pieces, then '\n' (dropped) and 'The'
                        [4, 5, 5, 5, 0, 0, 0, 0],      # no tool segment: no decision (the omission rule prices it)
                        [1, 2, 3, 0, 6, 7, 8, 2]])     # a capped rollout's last run opens a call: the opener's 3
    m = torch.tensor([[1, 1, 1, 0, 0, 1, 1, 1],
                      [1, 1, 1, 0, 0, 1, 1, 1],
                      [1, 1, 1, 1, 1, 0, 1, 1],
                      [1, 1, 1, 1, 0, 0, 0, 0],
                      [1, 1, 1, 0, 1, 1, 1, 1]])
    want = torch.tensor([[0, 0, 0, 0, 0, 1, 0, 0],
                         [0, 0, 0, 0, 0, 1, 1, 0],
                         [0, 0, 0, 0, 0, 0, 1, 1],
                         [0, 0, 0, 0, 0, 0, 0, 0],
                         [0, 0, 0, 0, 1, 1, 1, 0]])
    d = decision_mask(m, ids, pieces)
    assert torch.equal(d, want) and d.dtype == m.dtype
    _, summary, _, _ = segment_masks(m)
    assert (d <= summary).all()                         # always inside the summary segment


def test_decision_is_bounded_on_hostile_text():
    """Whitespace or empty pieces never settle the decision: it stops at DECISION_WINDOW tokens
    (or the run's end) and reads no more of the turn."""
    T = 3 + 200
    ids = torch.tensor([[1, 2, 3] + [10] * 100 + [11] * 100])
    m = torch.tensor([[1, 1, 1, 0] + [1] * (T - 4)])
    seen = []
    d = decision_mask(m, ids, lambda x: seen.append(len(x)) or pieces(x))
    assert int(d.sum()) == DECISION_WINDOW and max(seen) == DECISION_WINDOW
    short = torch.tensor([[1, 1, 1, 0, 1, 1, 0, 0]])   # a 2-token summary run of whitespace: both, no more
    assert torch.equal(decision_mask(short, torch.tensor([[1, 2, 3, 0, 10, 10, 4, 4]]), pieces),
                       torch.tensor([[0, 0, 0, 0, 1, 1, 0, 0]]))


def test_decision_on_the_demo_tokenizer():
    """The demo's BPE keeps <tool_call> one id: the decision is the summary turn's first token."""
    from lib.training.tiny import build_tokenizer
    tok = build_tokenizer(["The weather in Paris is sunny.", '<tool_call>\n{"name": "w"}\n</tool_call>'] * 4)
    call = tok('<tool_call>\n{"name": "w"}\n</tool_call>', add_special_tokens=False)["input_ids"]
    answer = tok("The weather in Paris is sunny.", add_special_tokens=False)["input_ids"]
    assert call[0] == tok.convert_tokens_to_ids("<tool_call>")
    ids = torch.tensor([call + [0] + answer])
    m = torch.tensor([[1] * len(call) + [0] + [1] * len(answer)])
    d = decision_mask(m, ids, tok.decode)
    assert d.nonzero()[:, 1].tolist() == [len(call) + 1]
