"""rewards.score against the released reward rules (tests/release_reward.py), case by case.

Thousands of seeded random trajectories, heavy on the edges where the two used to differ:
null / empty / non-dict `arguments`, `parameters` instead, JSON-string arguments, mismatched
<think>/</thinking> tags, non-dict items, `[]` and empty blocks, unclosed tags, bad names,
bare-dict / flat / nested / JSON-string gold, empty dicts and non-string names in gold. The
five parts, the omission flag and ToolPO's r_action must be equal wherever the release does
not raise.
"""
import json
import random
from types import SimpleNamespace

import pytest

from rewards import score
from release_reward import PARTS, release_parts

CASES = 6000  # ~3 s; the edges below come up hundreds of times each at this count
NAMES = ["f", "g", "h", "5", "", "F"]
KEYS = ["a", "b", "c"]
VALUES = [1, "1", 1.0, 2, "2.0", True, "true", "True", False, 0, "0", "x", " X ", None, [1, 2], [2, 1],
          {"k": 1}, {"k": "1"}, "", 1e-10, 3.5, "nan"]


class Judge:
    def rate(self, question, tool_responses, response, facts=None):
        return 5


def args(rng):
    return {k: rng.choice(VALUES) for k in rng.sample(KEYS, rng.randint(0, 3))}


def arg_field(rng):
    """A value for `arguments` / `parameters`: the forms that Python `or` treats differently."""
    return rng.choice([args(rng), args(rng), {}, None, "", "{\"a\": 1}", "[]", [], [1], 0, False, "x"])


def pred_item(rng):
    r = rng.random()
    if r < 0.06:
        return rng.choice([5, "f", None, [], [{"name": "f"}]])  # not a dict
    item = {"name": rng.choice(NAMES + [5, None, ["f"]] if r < 0.12 else NAMES[:3] + NAMES[:3] + NAMES)}
    for key in rng.choice([["arguments"], ["arguments"], ["parameters"], ["arguments", "parameters"],
                           ["parameters", "arguments"], []]):
        item[key] = arg_field(rng)
    return item


def block(rng):
    r = rng.random()
    if r < 0.08:
        return rng.choice(["", " ", "[]", " [ ] ", "{oops", "3", "null", "\"f\"", "{}", "[[]]", "NaN",
                           "[" * 1200 + "]" * 1200, '{"name": "f", "arguments": {"a": ' + "7" * 5000 + "}}"])
    items = [pred_item(rng) for _ in range(rng.randint(1, 3))]
    body = json.dumps(items[0] if len(items) == 1 and rng.random() < 0.5 else items)
    return rng.choice(["", "\n", " "]) + body + rng.choice(["", "\n"])


def text(rng):
    parts = []
    for _ in range(rng.randint(0, 5)):
        r = rng.random()
        if r < 0.5:
            parts.append("<tool_call>" + block(rng) + "</tool_call>")
        elif r < 0.6:
            parts.append(rng.choice(["<tool_call>", "</tool_call>", "<tool_call>" + block(rng)]))
        elif r < 0.8:
            inner = "<tool_call>" + block(rng) + "</tool_call>" if rng.random() < 0.6 else "plan"
            parts.append(rng.choice(["<think>", "<thinking>"]) + inner +
                         rng.choice(["</think>", "</thinking>", "", "</think>x</thinking>"]))
        else:
            parts.append(rng.choice(["Sure.", "The answer is 42.", " ", "<|im_end|>", "</think>", "<think>"]))
    return "".join(parts)


def gold_item(rng):
    r = rng.random()
    if r < 0.15:
        return rng.choice(NAMES[:3])  # a bare name
    if r < 0.2:
        return rng.choice([{}, 7, None, [], {"arguments": {"a": 1}}, {"name": 5, "arguments": {"a": 1}},
                           {"name": ["f"]}])  # the last: an unhashable name, the release raises
    item = {"name": rng.choice(NAMES[:3])}
    form = rng.random()
    if form < 0.6:
        item["arguments"] = args(rng)
    elif form < 0.75:
        item["arguments"] = json.dumps(args(rng))
    elif form < 0.85:
        item["parameters"] = args(rng)  # the release ignores it
    elif form < 0.95:
        item["arguments"] = rng.choice([None, "", "{bad", "[1]", [], 0])
    return item


def gold(rng):
    r = rng.random()
    steps = [[gold_item(rng) for _ in range(rng.randint(0, 3))] for _ in range(rng.randint(1, 3))]
    if r < 0.45:
        g = steps
    elif r < 0.65:
        g = steps[0]  # one flat step
    elif r < 0.7:
        g = [steps[0], "junk", steps[-1], 3]
    elif r < 0.75:
        g = gold_item(rng)  # a bare item: a dict is no gold for the release
    elif r < 0.85:
        g = rng.choice([None, [], "", "not json", "[]", 5, {}])
    else:
        g = steps if rng.random() < 0.5 else steps[0]
    return json.dumps(g) if rng.random() < 0.25 and g is not None else g


def allowed(rng):
    return rng.choice([["f", "g"], ["f", "g", "h"], ["f"], ["f", 5], ["g", "h", "F"], [], None])


def project_parts(t, g, a):
    s = score(t, "A final answer long enough.", ["{}"], SimpleNamespace(gold=g, allowed_tools=a, question="q",
                                                                          facts=[]), Judge())
    return {k: s[k] for k in PARTS + ("omission", "r_action")}


def test_parity_on_random_trajectories():
    rng = random.Random(0)
    compared, differences = 0, []
    seen = dict.fromkeys(["omission", "empty block", "mismatched think", "null arguments", "bare dict gold"], 0)
    for _ in range(CASES):
        t, g, a = text(rng), gold(rng), allowed(rng)
        try:
            want = release_parts(t, g, a)
        except Exception:  # the release raises here: nothing to compare, but the project must not
            project_parts(t, g, a)
            continue
        compared += 1
        got = project_parts(t, g, a)
        if got != want:
            differences.append((t, g, a, got, want))
        seen["omission"] += want["omission"] == 1.0
        seen["empty block"] += "<tool_call>[]</tool_call>" in t
        seen["mismatched think"] += "<think>" in t and "</thinking>" in t
        seen["null arguments"] += '"arguments": null' in t
        seen["bare dict gold"] += isinstance(g, dict) and bool(g)
    assert not differences, f"{len(differences)} of {compared} differ, first: {differences[0]}"
    assert 0.9 * CASES < compared < CASES
    assert min(seen.values()) >= 20, seen  # the generator does reach every edge


@pytest.mark.parametrize("t,g,a", [
    # arguments null / empty / [] fall through to parameters (Python `or`)
    ('<tool_call>{"name": "f", "arguments": null, "parameters": {"a": 1}}</tool_call>', [[{"name": "f", "arguments": {"a": 1}}]], ["f"]),
    ('<tool_call>{"name": "f", "arguments": "", "parameters": {"a": 2}}</tool_call>', [[{"name": "f", "arguments": {"a": 1}}]], ["f"]),
    ('<tool_call>{"name": "f", "arguments": []}</tool_call>', [["f"]], ["f"]),
    # a think block closed by the other tag
    ('<think><tool_call>{"name": "f"}</tool_call></thinking>ok', [["f"]], ["f"]),
    ('<thinking>x</think><tool_call>{"name": "f"}</tool_call>', [["f"]], ["f"]),
    # an unclosed think: nothing is stripped, the call after it counts
    ('<think>plan it<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>', [[{"name": "f", "arguments": {"a": 1}}]], ["f"]),
    ('<think>a</think>b<think>c<tool_call>{"name": "f"}</tool_call>', [["f"]], ["f"]),
    # an empty list, garbage: not an omission for the release
    ("<tool_call>[]</tool_call>", [[{"name": "f", "arguments": {"a": 1}}]], ["f"]),
    ("<tool_call>garbage</tool_call>", [["f"]], ["f"]),
    # gold: a bare dict is none, `parameters` ignored, an empty dict dropped in nested steps
    ("no call", {"name": "f", "arguments": {"a": 1}}, ["f"]),
    ('<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>', [[{"name": "f", "parameters": {"a": 1}}]], ["f"]),
    ('<tool_call>[{"name": "f"}, {"name": "f"}]</tool_call>', [[{}, "f", {}]], ["f"]),
    ('<tool_call>{"name": "f"}</tool_call>', [{}], ["f"]),
    # omission with gold without arguments: every part 0
    ("I will not call.", [["f"]], ["f"]),
    # no allowed tools: all 0
    ('<tool_call>{"name": "f"}</tool_call>', [["f"]], []),
    # a numeric allowed tool name is compared as a string
    ('<tool_call>{"name": "5"}</tool_call>', [["5"]], [5]),
])
def test_parity_named_edges(t, g, a):
    assert project_parts(t, g, a) == release_parts(t, g, a)


def test_an_unclosed_think_does_not_hide_a_call():
    """The release's pattern needs a closing tag: an unclosed `<think>` strips nothing, so a call
    after it is a full call (process 1.0), and a call inside a closed think is no call at all."""
    g, a = [[{"name": "f", "arguments": {"a": 1}}]], ["f"]
    call = '<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>'
    parts = project_parts("<think>I should call f" + call, g, a)
    assert parts == release_parts("<think>I should call f" + call, g, a) and parts["omission"] == 0
    assert all(parts[k] == 1.0 for k in PARTS)
    assert project_parts("<think>" + call + "</think>", g, a)["omission"] == 1.0
