"""rewards.py: HierR (docs/method.md §2) with its exact numbers, ToolPO's rewards, hostile input."""
import json
from types import SimpleNamespace

import pytest
from hypothesis import given, strategies as st

from release_reward import PARTS, release_parts
from rewards import (MAX_JUDGE_CHARS, FactsJudge, HierR, NoisyJudge, loose_equal, predicted_calls, process_score, score,
                     summary_judge, summary_score, turn_rewards, WEIGHTS)
from lib.inputs.data import normalize_gold
from lib.frozen.judges import LLMJudge
from helpers import MB, linear
from test_segment import FUZZ, SOUP

DEEP = []  # a list nested 10,000 deep: str() and json.dumps() of it raise RecursionError
for _ in range(10_000):
    DEEP = [DEEP]
LOOP = []  # a list that holds itself
LOOP.append(LOOP)


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
                 "process": pytest.approx(0.90), "omission": 0.0}
    # no tool response ever came back, so the summary earns nothing (docs/method.md §2.2)
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
    out = score(block(call("f", x=1)), "A long enough final response.", ["{}"], task([[call("f", x=1)]]), FixedJudge(5),
                HierR(lam_tool=1.0, lam_sum=-2.0))
    assert out["score"] == pytest.approx(-1.0)
    assert out["r_tool"] == 0.0 and out["r_sum"] == pytest.approx(-1.0)


def test_full_marks_and_segment_rewards():
    text = block(call("f", x=1), call("g", y="a")) + "The answer is that."
    out = score(text, "The answer is that.", ["{}", "{}"], task([[call("f", x=1), call("g", y="a")]]),
                FixedJudge(4))
    assert out["process"] == pytest.approx(1.0) and out["summary"] == 0.75
    assert out["score"] == pytest.approx(1.75)
    assert (out["r_tool"], out["r_sum"]) == (pytest.approx(1.0), 0.75)


def test_extra_call_cost_by_hand():
    """Eq. 16: each valid call beyond the gold's count costs c of S_process in score and R_tool; the
    logged process (what Success@0.9 reads) stays Eq. 2's; c = 0 is HierR bit for bit; never below 0."""
    gold = task([[call("f", x=1)]])
    one, three = block(call("f", x=1)), block(call("f", x=1)) + block(call("f", x=1), call("g", y="a"))
    base = score(three + "It is done now.", "It is done now.", ["{}"] * 3, gold, FixedJudge(5))
    assert base["extra"] == 2.0 and base["r_tool"] == base["process"]
    out = score(three + "It is done now.", "It is done now.", ["{}"] * 3, gold, FixedJudge(5), HierR(extra_call_cost=0.1))
    assert out["process"] == base["process"] and out["r_tool"] == pytest.approx(base["process"] - 0.2)
    assert out["score"] == pytest.approx(base["score"] - 0.2) and out["r_sum"] == base["r_sum"] == 1.0
    right = score(one + "It is done now.", "It is done now.", ["{}"], gold, FixedJudge(5), HierR(extra_call_cost=0.1))
    assert right["extra"] == 0.0 and right["r_tool"] == pytest.approx(1.0)      # no call beyond the gold's: no charge
    assert score(three, "", ["{}"] * 3, gold, FixedJudge(5), HierR(extra_call_cost=5.0))["r_tool"] == 0.0
    irr = score(one + "It is done now.", "It is done now.", ["{}"], task([]), FixedJudge(5), HierR(extra_call_cost=0.25))
    assert irr["extra"] == 1.0 and irr["r_tool"] == pytest.approx(irr["process"] - 0.25)


def test_extra_block_cost_by_hand():
    """Eq. 16's block term: each valid block beyond the gold's steps costs b; a parallel step split over
    two blocks is charged and the same calls in one block are not; invalid blocks are not counted."""
    gold = task([[call("f", x=1), call("g", y="a")]])
    merged, split = block(call("f", x=1), call("g", y="a")), block(call("f", x=1)) + block(call("g", y="a"))
    one = score(merged + "It is done now.", "It is done now.", ["{}"] * 2, gold, FixedJudge(5), HierR(extra_block_cost=0.2))
    assert one["extra_blocks"] == 0.0 and one["r_tool"] == pytest.approx(1.0)
    two = score(split + "It is done now.", "It is done now.", ["{}"] * 2, gold, FixedJudge(5), HierR(extra_block_cost=0.2))
    assert (two["extra"], two["extra_blocks"]) == (0.0, 1.0)
    assert two["r_tool"] == pytest.approx(two["process"] - 0.2) and two["process"] == pytest.approx(0.70)  # parallel 0
    bad = "<tool_call>not json</tool_call>"
    out = score(merged + bad + "It is done now.", "It is done now.", ["{}"] * 2, gold, FixedJudge(5),
                HierR(extra_block_cost=0.2))
    assert out["extra_blocks"] == 0.0                                             # an invalid block: Format's, not Eq. 16's
    both = score(split + block(call("f", x=1)) + "Done now, really.", "Done now, really.", ["{}"] * 3, gold, FixedJudge(5),
                 HierR(extra_call_cost=0.1, extra_block_cost=0.2))
    assert (both["extra"], both["extra_blocks"]) == (1.0, 2.0)
    assert both["r_tool"] == pytest.approx(max(0.0, both["process"] - 0.1 - 0.4))


def test_gold_forms():
    nested = [[call("f", x=1), call("g")], [call("f", x=2)]]
    assert normalize_gold(json.dumps(nested)) == [[call("f", x=1), call("g")], [call("f", x=2)]]
    assert normalize_gold("not json") == []
    assert normalize_gold(None) == [] and normalize_gold([]) == []
    # flat step, bare names, JSON-string arguments
    assert normalize_gold(["f", {"name": "g", "arguments": '{"y": 3}'}, 7]) == \
        [[call("f"), call("g", y=3)]]
    # the release reads a gold call's `arguments` only, and no bare dict
    assert normalize_gold([{"name": "g", "parameters": {"y": 3}}]) == [[call("g")]]
    assert normalize_gold({"name": "g", "arguments": {"y": 3}}) == [] == normalize_gold('{"name": "g"}')
    # nested: non-list steps skipped, bad items and empty dicts dropped, empty steps dropped
    assert normalize_gold([["f", 3, {}], "junk", [], [None, {}]]) == [[call("f")]]
    # flat: an empty dict stays, a call with no usable name gets "", which no prediction has
    assert normalize_gold([{}, {"name": 5, "arguments": "[1]"}]) == [[call(""), call("")]]
    # normalised gold normalises to itself (lib/inputs/data.py normalises once, score() again)
    for g in (nested, ["f", {"name": "g", "arguments": '{"y": 3}'}], [{}], [["f", {"name": None}]]):
        assert normalize_gold(normalize_gold(g)) == normalize_gold(g)


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
    for r, s in [(1, 0.0), (2, 0.25), (3, 0.5), (4, 0.75), (5, 1.0), (None, None), (7, None)]:  # None: unrated
        assert summary_score("Long enough response.", "q", ["{}"], FixedJudge(r)) == s


def test_facts_judge():
    j = FactsJudge()
    facts = ["Paris", "21.5", "1,200"]
    assert j.rate("q", ["{}"], "Paris is at 21.50 degrees and costs 1200.", facts) == 5
    assert j.rate("q", ["{}"], "It is 21.5 in  PARIS.", facts) == 4   # 2/3 -> 1 + round(2.67)
    assert j.rate("q", ["{}"], "Nothing useful.", facts) == 1
    assert j.rate("q", ["{}"], "Paris.", ["Paris", "x", "y", "z", "w", "v", "u", "t"]) == 2  # 1/8: half rounds up
    assert j.rate("q", ["{}"], "Anything", []) is None
    assert j.can_rate(SimpleNamespace(facts=["Paris"])) and not j.can_rate(SimpleNamespace(facts=[]))



def test_summary_judge_is_the_llm_judge_on_a_client_else_the_facts_judge():
    client = object()
    j = summary_judge(client, "{question}{responses}{response}", "s {question}{responses}{response}")
    assert isinstance(j, LLMJudge) and j.client is client
    assert (j.prompt, j.solved_prompt) == ("{question}{responses}{response}", "s {question}{responses}{response}")
    assert isinstance(summary_judge(None), FactsJudge)

def test_omission_zeroes_every_part():
    # gold calls without arguments used to keep key = value = 1 on an omission
    s = process_score("No call here.", [["f", "g"]], ["f", "g"])
    assert s == dict.fromkeys(["format", "name", "key", "value", "parallel", "process"], 0.0) | {"omission": 1.0}
    out = score("No call here.", "No call here.", [], task([["f"]]), FixedJudge(5))
    assert out["score"] == -0.5 and out["key"] == out["value"] == 0.0 and out["r_action"] == out["r_succ"] == 0.0
    # a tag of the other think kind hides the call too (the release's think pattern)
    assert score("<think>" + block(call("f")) + "</thinking>", "", [], task([["f"]]), FixedJudge(5))["omission"] == 1.0


def test_tag_without_a_call_is_not_an_omission_unless_strict():
    gold = task([[call("f", x=1)]])
    for text, want in [("<tool_call>[]</tool_call>", 0.10), ("<tool_call>garbage</tool_call>", 0.0), ("<tool_call>", 0.0)]:
        out = score(text, "", [], gold, FixedJudge(5))  # the release: an opening tag is enough
        assert out["omission"] == 0.0 and out["score"] == pytest.approx(want)  # [] is a valid block: format 1
        out = score(text, "", [], gold, FixedJudge(5), HierR(strict_calls=True))  # the project's deviation
        assert out["omission"] == 1.0 and out["score"] == -0.5


def test_empty_block_on_irrelevant_prompt():
    answer = "There is no tool for this; here is a direct answer."
    direct = score(answer, answer, [], task([]), FixedJudge(5))
    assert direct["score"] == pytest.approx(0.90)
    hack = "<tool_call>[]</tool_call>" + answer
    # no real tool response came back, so no summary gate opens whatever the judge thinks
    judge = FixedJudge(5)
    out = score(hack, answer, [], task([]), judge)
    assert judge.calls == 0 and out["summary"] == 0.0
    # the release's format rule counts [] as a valid block: process 1.0, above the direct answer
    assert out["score"] == pytest.approx(1.0)
    # strict: [] is an invalid block, the hack scores the direct answer's 0.90 and no more
    assert score(hack, answer, [], task([]), judge, HierR(strict_calls=True))["score"] == pytest.approx(0.90)


def test_no_allowed_tools_scores_zero():
    for allowed in ([], None):
        t = SimpleNamespace(gold=[[call("f")]], allowed_tools=allowed, question="q", facts=[])
        out = score(block(call("f")), "A long enough answer.", ["{}"], t, FixedJudge(5))
        assert out["score"] == 0.0 and out["process"] == 0.0 and out["omission"] == 0.0 and out["summary"] == 0.0


class DownJudge:
    def rate(self, question, tool_responses, response, facts=None):
        raise ConnectionError("judge unreachable after 3 retries")

    def solved(self, question, tool_responses, response):
        raise ConnectionError("judge unreachable after 3 retries")


def test_judge_transport_failure():
    text = block(call("f", x=1)) + "The answer is that."
    out = score(text, "The answer is that.", ["{}"], task([[call("f", x=1)]]), DownJudge())
    assert out["judge_failed"] == 1.0 and out["summary"] == 0.0 and out["score"] == pytest.approx(1.0)
    assert score(text, "The answer is that.", ["{}"], task([[call("f", x=1)]]), FixedJudge(4))["judge_failed"] == 0.0
    # a rating that cannot be parsed is not a transport failure: the summary was judged but is unrated
    out = score(text, "The answer is that.", ["{}"], task([[call("f", x=1)]]), FixedJudge(None))
    assert (out["judge_failed"], out["judged"], out["unrated"], out["summary"]) == (0.0, 1.0, 1.0, 0.0)
    out = score(text, "The answer is that.", ["{}"], task([[call("f", x=1)]]), FixedJudge(4))
    assert (out["judged"], out["unrated"]) == (1.0, 0.0)
    out = score(text, "The answer is that.", [], task([[call("f", x=1)]]), FixedJudge(None))  # gate closed: not asked
    assert (out["judged"], out["unrated"]) == (0.0, 0.0)


def test_judge_sees_bounded_text():
    seen = {}

    class Spy:
        def rate(self, question, tool_responses, response, facts=None):
            seen.update(q=len(question), obs=sum(map(len, tool_responses)), resp=len(response))
            return 3

    big = "y" * 3 * MAX_JUDGE_CHARS
    t = SimpleNamespace(gold=[], allowed_tools=["f"], question=big, facts=[])
    assert score("x", big, [big, big, "tail"], t, Spy())["summary"] == 0.5
    assert seen == {"q": MAX_JUDGE_CHARS, "obs": MAX_JUDGE_CHARS, "resp": MAX_JUDGE_CHARS}


class SolvedJudge(FixedJudge):
    def __init__(self, verdict):
        super().__init__(3)
        self.verdict, self.asked = verdict, 0

    def solved(self, question, tool_responses, response):
        self.asked += 1
        return self.verdict


def test_toolpo_action_and_success_rule():
    gold = task([[call("f", a=1, b="x"), call("g")], [call("f", a=2)]])
    # f(a=1, b=X, extra) matches strictly (extra keys allowed, values loose); g matches on its name;
    # f(a=3) does not match f(a=2)
    text = block(call("f", a="1", b=" X ", c=0), call("g", z=1)) + block(call("f", a=3))
    out = score(text, "A long enough answer.", ["{}"], gold, FixedJudge(3))
    assert out["r_action"] == pytest.approx(2 / 3) and out["r_succ"] == 0.0
    text = block(call("f", a=1, b="x"), call("g")) + block(call("f", a=2.0))
    out = score(text, "A long enough answer.", ["{}"], gold, FixedJudge(3))
    assert out["r_action"] == 1.0 and out["r_succ"] == 1.0
    # one-to-one: one prediction cannot match two gold calls
    out = score(block(call("f", a=1)), "", [], task([["f", "f"]]), FixedJudge(3))
    assert out["r_action"] == 0.5
    # no gold: r_action 1 (the release), success only without a call
    assert score("Direct answer.", "Direct answer.", [], task([]), FixedJudge(3))["r_succ"] == 1.0
    out = score(block(call("f")), "", [], task([]), FixedJudge(3))
    assert out["r_action"] == 1.0 and out["r_succ"] == 0.0


def test_toolpo_success_from_the_judge():
    text = block(call("f", x=1)) + "The answer is that."
    for verdict, want in [(True, 1.0), (False, 0.0), (None, 0.0)]:
        judge = SolvedJudge(verdict)
        out = score(text, "The answer is that.", ["{}"], task([[call("g")]]), judge, HierR(succ_judge=True))
        assert out["r_succ"] == want and judge.asked == 1
    judge = SolvedJudge(True)  # the rule is used without the flag, or for a judge without solved()
    assert score(text, "The answer is that.", ["{}"], task([[call("g")]]), judge)["r_succ"] == 0.0
    assert judge.asked == 0
    assert score(text, "The answer is that.", ["{}"], task([[call("f", x=1)]]), FixedJudge(3), HierR(succ_judge=True))["r_succ"] == 1.0
    # too short a final response is unsolved without asking; a transport failure is judge_failed
    assert score(text, "ok", ["{}"], task([[call("g")]]), judge, HierR(succ_judge=True))["r_succ"] == 0.0 and judge.asked == 0
    out = score(text, "The answer is that.", [], task([[call("g")]]), DownJudge(), HierR(succ_judge=True))
    assert out["r_succ"] == 0.0 and out["judge_failed"] == 1.0


@pytest.mark.parametrize("x,y", [
    (10 ** 5000, 10 ** 5000), (10 ** 5000, "1"), (float("nan"), float("nan")), (float("inf"), "inf"),
    (DEEP, DEEP), (DEEP, [1]), (LOOP, LOOP), ({1: "a", "b": 2}, {"b": 2, 1: "a"}), ([10 ** 5000], [1]),
], ids=["huge", "huge-str", "nan", "inf", "deep", "deep-list", "loop", "mixed-keys", "huge-in-list"])
def test_loose_equal_never_raises(x, y):
    assert loose_equal(x, y) in (True, False)
    assert loose_equal(float("nan"), "NaN") is True  # equal strings, as in the release


def test_megabyte_trajectories_score_in_linear_time():
    one = block(call("f", a=1, b="x"))
    text = lambda n: one * (n // len(one))  # noqa: E731
    gold = [[call("f", a=1, b="x"), call("g")], [call("f", a=2)], [call("f", b="y")]]
    blocks, denom = linear(predicted_calls, lambda n: [text(n), ["f", "g"]])
    assert len(blocks) == denom == MB // len(one)
    s = linear(process_score, lambda n: [text(n), gold, ["f", "g"]])
    assert 0 <= s["process"] <= 1
    out = linear(score, lambda n: [text(n), text(n), [text(n), text(n)], task(gold), FactsJudge()])
    assert -0.5 <= out["score"] <= 2.0
    for hostile in [lambda n: "<tool_call>" * (n // 11), lambda n: "<think>" + "x" * n,
                    lambda n: "<tool_call>" + "[" * n + "</tool_call>",
                    lambda n: ("<tool_call>" + "9" * 5000 + "</tool_call>") * (n // 5023)]:
        out = linear(score, lambda n: [hostile(n), hostile(n), [hostile(n)], task(gold, facts=["1"]), FactsJudge()])
        assert -0.5 <= out["score"] <= 2.0
    # 40 and 160 MB, relative to copying the strings: a CI machine measured 14x for 40 to 160 MB
    # (fresh pages from the kernel), 11.7x for 32 to 128 MB, 12x for 8 to 32 MB under load.
    copy = lambda x, y: (x.lower(), y.lower())  # noqa: E731
    assert linear(loose_equal, lambda n: ["a" * n, "a" * n + " "], n=40 * MB, like=copy) is True
    assert linear(loose_equal, lambda n: [10 ** (n // 10), 10 ** (n // 10)]) is False  # cannot be printed: not equal


# Hostile inputs for the fuzz test below: the first bytes pick gold, allowed tools, judge and two
# values for loose_equal, the rest index into segment's tag soup.
GOLDS = [[], None, "", "not json", [[call("f", a=1)]], [[call("f", a=1), call("g", a="x")], [call("f", a=2)]],
         ["f", "g"], [{}], [["f", {}]], {"name": "f"}, json.dumps([[call("f", a=1)]]), [[{"name": ["f"]}]],
         [[{"name": "f", "arguments": '{"a": 1}'}]], [[{"name": "f", "parameters": {"a": 1}}]], [["f"], ["f"], ["g"]]]
ALLOWED = [["f", "g"], ["f"], [], None, ["f", 5], "fg"]
VALUES = [None, 0, 1, -1, 1.0, -0.0, 1e-10, 1e308, float("inf"), float("nan"), True, False, "", " ", "1", "1.0",
          " 1 ", "true", "TRUE", "0", "nan", "inf", "1e400", "x", "X ", "é", 10 ** 5000, 10 ** 4000, [], {}, [1],
          ["1"], [1, 2], [2, 1], {"a": 1}, {"a": "1"}, {"b": 1, "a": 2}, {1: "a", "b": 2}, [float("nan")], DEEP,
          LOOP, {"a": DEEP}, b"1", "9" * 5000]


class FuzzJudge:
    def __init__(self, mode):
        self.mode = mode

    def rate(self, question, tool_responses, response, facts=None):
        assert len(response) <= MAX_JUDGE_CHARS and sum(map(len, tool_responses)) <= MAX_JUDGE_CHARS
        if self.mode == 0:
            raise ConnectionError("down")
        return [None, 1, 5, 7, True, 3.0][self.mode % 6]

    def solved(self, question, tool_responses, response):
        if self.mode == 0:
            raise ConnectionError("down")
        return [None, True, False, "yes"][self.mode % 4]


@pytest.mark.slow
@FUZZ
@given(st.binary(min_size=5, max_size=52))
def test_rewards_fuzz(b):
    """predicted_calls, process_score, score and loose_equal never raise and stay in range; the
    five parts equal the release's wherever the release does not raise."""
    gold, allowed, judge = GOLDS[b[0] % len(GOLDS)], ALLOWED[b[1] % len(ALLOWED)], FuzzJudge(b[2] % 7)
    x, y = VALUES[b[3] % len(VALUES)], VALUES[b[4] % len(VALUES)]
    text = "".join(SOUP[i % len(SOUP)] for i in b[5:])
    eq = loose_equal(x, y)
    assert eq in (True, False) and loose_equal(y, x) is eq
    blocks, denom = predicted_calls(text, allowed if b[1] % 2 else None, strict=bool(b[2] & 8))
    assert len(blocks) <= denom and all(not c.error for calls in blocks for c in calls)
    parts = process_score(text, gold, allowed)
    assert all(0.0 <= parts[k] <= 1.0 for k in parts) and parts["omission"] in (0.0, 1.0)
    try:
        want = release_parts(text, gold, allowed)
    except Exception:  # the release raises here
        want = None
    if want is not None:
        assert {k: parts[k] for k in PARTS + ("omission",)} == {k: want[k] for k in PARTS + ("omission",)}
    t = SimpleNamespace(gold=gold, allowed_tools=allowed, question=text, facts=["1"])
    out = score(text, text, [text, text] if b[2] & 16 else [], t, judge,
                HierR(strict_calls=bool(b[2] & 8), succ_judge=bool(b[2] & 32)))
    assert -0.5 <= out["score"] <= 2.0
    assert all(0.0 <= out[k] <= 1.0 for k in ("process", "summary", "r_action", "r_succ", "r_tool"))
    assert out["judge_failed"] in (0.0, 1.0) and out["omission"] in (0.0, 1.0)


def test_noisy_judge_replaces_a_share_p_of_ratings_uniformly():
    base = FixedJudge(4)
    rate = lambda j, i: j.rate("q?", ["obs"], f"answer {i}", ["f"])  # noqa: E731
    assert [rate(NoisyJudge(base, 0.0, seed=1), i) for i in range(50)] == [4] * 50 and base.calls == 50
    base.calls = 0
    noisy = [rate(NoisyJudge(base, 1.0, seed=1), i) for i in range(5000)]
    assert base.calls == 0 and set(noisy) == {1, 2, 3, 4, 5}
    assert all(abs(noisy.count(k) / 5000 - 0.2) < 0.03 for k in range(1, 6))  # uniform
    half = [rate(NoisyJudge(base, 0.5, seed=1), i) for i in range(4000)]
    assert abs(base.calls / 4000 - 0.5) < 0.04  # the judge was asked for about half
    assert abs(half.count(4) / 4000 - (0.5 + 0.5 / 5)) < 0.04
    # reproducible for a seed, whatever the call order; another seed draws other noise
    again = NoisyJudge(base, 1.0, seed=1)
    assert [rate(again, i) for i in reversed(range(5000))] == noisy[::-1]
    assert [rate(NoisyJudge(base, 1.0, seed=2), i) for i in range(5000)] != noisy
    # through score: S_sum = (r - 1) / 4 of the noisy level; gating still comes first
    t = task([[call("f", x=1)]], facts=["42"])
    out = score(block(call("f", x=1)) + "It is 42 here.", "It is 42 here.", ["{}"], t, NoisyJudge(FixedJudge(5), 1.0))
    assert out["summary"] in {0.0, 0.25, 0.5, 0.75, 1.0}
    assert score(block(call("f", x=1)) + "It is 42 here.", "It is 42 here.", [], t,
                 NoisyJudge(FixedJudge(5), 1.0))["summary"] == 0.0


# --------------------------------------------------------------------------------------------
# per-turn tool rewards (--turn-credit, Eq. 14)
# --------------------------------------------------------------------------------------------
def turn_loop(turn_texts, gold, allowed):
    """Reference: turn k against gold step k alone, by the release's own rules (release_parts
    on a one-step gold); 0 past the last gold step; an omission there is 0."""
    steps, _ = __import__("release_reward").gold_calls(gold)
    out = []
    for k, text in enumerate(turn_texts):
        if k >= len(steps):
            out.append(0.0)
            continue
        p = release_parts(text, [steps[k]], allowed)
        out.append(0.0 if p["omission"] else sum(WEIGHTS[x] * p[x] for x in PARTS))
    return out


STEP_A = [{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_weather", "arguments": {"city": "Rome"}}]
STEP_B = [{"name": "get_quote", "arguments": {"ticker": "ACME"}}]
TURN_A = ('<tool_call>[{"name": "get_weather", "arguments": {"city": "Paris"}}, '
          '{"name": "get_weather", "arguments": {"city": "Rome"}}]</tool_call>')
TURN_A1 = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
TURN_B = '<tool_call>{"name": "get_quote", "arguments": {"ticker": "ACME"}}</tool_call>'
TURN_BAD = '<tool_call>{"name": "get_quote", "arguments": </tool_call>'
ALLOWED = ["get_weather", "get_quote"]


@pytest.mark.parametrize("turns, gold", [
    ([TURN_A, TURN_B], [STEP_A, STEP_B]),                       # both right
    ([TURN_A1, TURN_B], [STEP_A, STEP_B]),                      # the parallel step split: turn 0 loses parallel and name
    ([TURN_A1, TURN_A1, TURN_B], [STEP_A, STEP_B]),             # more turns than steps: the last scores 0
    ([TURN_A], [STEP_A, STEP_B]),                               # fewer turns than steps
    ([TURN_BAD, TURN_B], [STEP_A, STEP_B]),                     # a malformed block
    (["<think>x</think>I will look.", TURN_B], [STEP_A, STEP_B]),  # no tag in turn 0: an omission there
    ([TURN_B], []),                                             # no gold: past the last step
    ([TURN_A, TURN_B], json.dumps([STEP_A, STEP_B])),           # the release's JSON-string gold
    ([TURN_B], ["get_quote"]),                                  # a flat step of bare names
    ([TURN_A, TURN_B], [[{"name": "get_weather", "arguments": {"city": "Paris"}}, 7], [], STEP_B]),  # junk dropped
])
def test_turn_rewards_match_the_loop(turns, gold):
    got = turn_rewards(turns, gold, ALLOWED)
    assert got == pytest.approx(turn_loop(turns, gold, ALLOWED))
    assert len(got) == len(turns)


def test_turn_rewards_tell_a_right_turn_from_a_wrong_one():
    right, wrong = turn_rewards([TURN_A, TURN_B], [STEP_A, STEP_B], ALLOWED), turn_rewards([TURN_A, TURN_A1], [STEP_A, STEP_B], ALLOWED)
    assert right == pytest.approx([1.0, 1.0]) and wrong[0] == pytest.approx(1.0) and wrong[1] < 0.5
    assert process_score(TURN_A + TURN_A1, [STEP_A, STEP_B], ALLOWED)["process"] > wrong[1]  # the pooled score hides it
