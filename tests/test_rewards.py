"""rewards.py: HierR (SPEC §2) with the exact numbers of the spec."""
import json
from types import SimpleNamespace

import pytest

from rewards import FactsJudge, loose_equal, normalize_gold, process_score, score, summary_score


def call(name, **args):
    return {"name": name, "arguments": args}


def block(*calls):
    return "<tool_call>" + json.dumps(list(calls)) + "</tool_call>"


class FixedJudge:
    def __init__(self, r):
        self.r, self.calls = r, 0

    def rate(self, question, tool_responses, response, facts=None):
        self.calls += 1
        return self.r


def task(gold, allowed=("f", "g"), facts=()):
    return SimpleNamespace(gold=gold, allowed_tools=list(allowed), question="q?", facts=list(facts))


def test_irrelevant_prompt_scores_090():
    s = process_score("I cannot help with tools here.", [], ["f"])
    assert s == {"format": 0.0, "name": 1.0, "key": 1.0, "value": 1.0, "parallel": 1.0,
                 "process": pytest.approx(0.90)}
    # no tool response ever came back, so the summary earns nothing (SPEC §2.2)
    out = score("A direct answer that is long enough.", "A direct answer that is long enough.",
                [], task([]), FixedJudge(5))
    assert out["summary"] == 0.0 and out["score"] == pytest.approx(0.90)
    assert out["r_tool"] == pytest.approx(0.90) and out["r_sum"] == 0.0


def test_omission_penalty():
    judge = FixedJudge(5)
    out = score("The weather is fine.", "The weather is fine.", [], task([[call("f", x=1)]]), judge)
    assert out["score"] == -0.5 and out["omission"] == 1.0
    assert out["process"] == 0.0 and out["summary"] == 0.0
    assert out["r_tool"] == 0.0 and out["r_sum"] == -0.5
    assert judge.calls == 0
    # a call inside a think block does not count as a call
    out = score("<think>" + block(call("f", x=1)) + "</think>ok", "ok", [], task([[call("f", x=1)]]), judge)
    assert out["omission"] == 1.0


def test_negative_score_guard():
    out = score(block(call("f", x=1)), "A long enough final response.", ["{}"],
                task([[call("f", x=1)]]), FixedJudge(5), lam_tool=1.0, lam_sum=-2.0)
    assert out["score"] == pytest.approx(-1.0)
    assert out["r_tool"] == 0.0 and out["r_sum"] == pytest.approx(-1.0)


def test_full_marks_and_segment_rewards():
    text = block(call("f", x=1), call("g", y="a")) + "The answer is that."
    out = score(text, "The answer is that.", ["{}", "{}"], task([[call("f", x=1), call("g", y="a")]]),
                FixedJudge(4))
    assert out["process"] == pytest.approx(1.0) and out["summary"] == 0.75
    assert out["score"] == pytest.approx(1.75)
    assert (out["r_tool"], out["r_sum"]) == (pytest.approx(1.0), 0.75)


def test_gold_forms():
    nested = [[call("f", x=1), call("g")], [call("f", x=2)]]
    assert normalize_gold(json.dumps(nested)) == [[call("f", x=1), call("g")], [call("f", x=2)]]
    assert normalize_gold("not json") == []
    assert normalize_gold(None) == [] and normalize_gold([]) == []
    # flat step, bare names, JSON-string arguments, 'parameters'
    assert normalize_gold(["f", {"name": "g", "arguments": '{"y": 3}'}, 7]) == \
        [[call("f"), call("g", y=3)]]
    assert normalize_gold([{"name": "g", "parameters": {"y": 3}}]) == [[call("g", y=3)]]
    # nested: non-list steps skipped, bad items dropped, empty steps dropped
    assert normalize_gold([["f", 3], "junk", [], [None]]) == [[call("f")]]


def test_flat_gold_scores_like_one_step():
    text = block(call("f", x=1), call("g", y=2))
    flat = [call("f", x=1), call("g", y=2)]
    assert process_score(text, flat, ["f", "g"]) == process_score(text, [flat], ["f", "g"])
    assert process_score(text, flat, ["f", "g"])["process"] == pytest.approx(1.0)
    # a preview's flat list of names: no arguments, so key = value = 1
    s = process_score(text, ["f", "g"], ["f", "g"])
    assert s["key"] == s["value"] == 1.0 and s["name"] == 1.0


def test_format_counts_invalid_blocks_in_denominator():
    good = block(call("f", x=1))
    assert process_score(good + "<tool_call>{oops</tool_call>", [[call("f", x=1)]], ["f"])["format"] == 0.5
    # an unclosed opening tag counts in the denominator too
    assert process_score(good + "<tool_call>", [[call("f", x=1)]], ["f"])["format"] == 0.5
    # arguments given as a JSON string make the block invalid for the reward
    s = process_score('<tool_call>{"name": "f", "arguments": "{\\"x\\": 1}"}</tool_call>', [[call("f", x=1)]], ["f"])
    assert s["format"] == 0.0 and s["name"] == 0.0
    # a call with no arguments is valid
    assert process_score('<tool_call>{"name": "f"}</tool_call>', [["f"]], ["f"])["format"] == 1.0


def test_not_allowed_name_is_invalid():
    s = process_score(block(call("h", x=1)), [[call("h", x=1)]], ["f", "g"])
    assert s["format"] == 0.0 and s["name"] == 0.0 and s["key"] == 0.0 and s["parallel"] == 0.0
    # one bad call spoils the whole block
    s = process_score(block(call("f", x=1), call("h")), [[call("f", x=1)]], ["f", "g"])
    assert s["format"] == 0.0


def test_think_stripped_before_parsing():
    text = "<think>" + block(call("g")) + "</think>" + block(call("f", x=1))
    s = process_score(text, [[call("f", x=1)]], ["f", "g"])
    assert s["format"] == 1.0 and s["name"] == 1.0


def test_name_f1_multiset():
    text = block(call("f"), call("f"), call("g"))
    s = process_score(text, [[call("f"), call("g"), call("g")]], ["f", "g"])
    assert s["name"] == pytest.approx(2 * 2 / 6)


def test_parallel_rule():
    gold = [[call("f", x=1), call("g", y=1)], [call("f", x=2)]]
    together = block(call("f", x=1), call("g", y=1)) + block(call("f", x=2))
    apart = block(call("f", x=1)) + block(call("g", y=1)) + block(call("f", x=2))
    assert process_score(together, gold, ["f", "g"])["parallel"] == 1.0
    assert process_score(apart, gold, ["f", "g"])["parallel"] == 0.0
    # the FIRST VALID block decides: an invalid block before it is skipped
    assert process_score("<tool_call>bad</tool_call>" + together, gold, ["f", "g"])["parallel"] == 1.0
    # no gold but a call made
    assert process_score(block(call("f")), [], ["f"])["parallel"] == 0.0


def test_key_value_matching():
    gold = [[call("f", a=1, b=2), call("f", a=5)]]
    # pooled over turns, greedy per gold call, earliest wins ties
    text = block(call("f", a=1)) + block(call("f", a=1, b=2))
    s = process_score(text, gold, ["f"])
    # gold 1 picks pred 2 (key 1 + value 1); gold 2 gets pred 1 (key 1, value 0)
    assert s["key"] == pytest.approx(1.0) and s["value"] == pytest.approx(0.5)
    s = process_score(block(call("f", a=1, c=3)), [[call("f", a=1, b=2)]], ["f"])
    assert s["key"] == pytest.approx(1 / 3) and s["value"] == pytest.approx(1 / 2)
    # gold with arguments but no predicted call
    s = process_score("<tool_call>bad</tool_call>", [[call("f", a=1)]], ["f"])
    assert s["key"] == 0.0 and s["value"] == 0.0
    # no gold call has arguments: 1, 1
    s = process_score(block(call("f", z=1)), [["f"]], ["f"])
    assert s["key"] == 1.0 and s["value"] == 1.0


@pytest.mark.parametrize("x,y,eq", [
    (None, None, True), (None, 0, False), ("a", None, False),
    (" Paris ", "paris", True), (3, "3", True),
    (1, 1.0, True), ("2.50", 2.5, True), (0.1 + 0.2, 0.3, True), (1.0, 1.001, False),
    (True, "1", True), ("false", 0, True), ("yes", True, False), (False, "true", False),
    ([1, {"a": 2}], [1, {"a": 2}], True), ({"b": 1, "a": 2}, {"a": 2, "b": 1}, True),
    ([1, 2], [2, 1], False), ("x", "y", False), ("nan", "nan", True), ([1], "[1]", True),
])
def test_loose_equal(x, y, eq):
    assert loose_equal(x, y) is eq


def test_weights_and_hierr_ablation():
    zero = dict.fromkeys(["format", "name", "key", "value", "parallel"], 0.0)
    assert process_score(block(call("f", x=1)), [[call("f", x=1)]], ["f"], zero)["process"] == 0.0
    only_name = dict(zero, name=1.0)
    assert process_score(block(call("g")), [[call("f", x=1)]], ["f", "g"], only_name)["process"] == 0.0


def test_summary_gating_and_judge_failure():
    j = FixedJudge(5)
    assert summary_score("Long enough response.", "q", [], j) == 0.0  # no tool response
    assert summary_score("too short", "q", ["{}"], j) == 0.0           # < 10 characters
    assert summary_score("<think>long thinking here</think>short", "q", ["{}"], j) == 0.0
    assert j.calls == 0
    for r, s in [(1, 0.0), (2, 0.25), (3, 0.5), (4, 0.75), (5, 1.0), (None, 0.0), (7, 0.0)]:
        assert summary_score("Long enough response.", "q", ["{}"], FixedJudge(r)) == s


def test_facts_judge():
    j = FactsJudge()
    facts = ["Paris", "21.5", "1,200"]
    assert j.rate("q", ["{}"], "Paris is at 21.50 degrees and costs 1200.", facts) == 5
    assert j.rate("q", ["{}"], "It is 21.5 in  PARIS.", facts) == 4   # 2/3 -> 1 + round(2.67)
    assert j.rate("q", ["{}"], "Nothing useful.", facts) == 1
    assert j.rate("q", ["{}"], "Paris.", ["Paris", "x", "y", "z", "w", "v", "u", "t"]) == 2  # 1/8: half rounds up
    assert j.rate("q", ["{}"], "Anything", []) is None
