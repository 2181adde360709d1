"""segment.py: masks from the response mask (SPEC §1) and the call parser."""
import torch

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


def test_find_blocks():
    text = 'a<tool_call>{"name": "f"}</tool_call> b <tool_call>[1]</tool_call><tool_call>open'
    assert find_blocks(text) == ['{"name": "f"}', "[1]"]


def test_parse_block_forms():
    assert parse_block('{"name": "f", "arguments": {"x": 1}}') == [Call("f", {"x": 1})]
    assert parse_block('[{"name": "f"}, {"name": "g", "parameters": {"y": 2}}]') == \
        [Call("f", {}), Call("g", {"y": 2})]
    assert parse_block('{"name": "f", "arguments": "{\\"x\\": 1}"}') == [Call("f", {"x": 1})]
    assert parse_block("[]") == []


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
