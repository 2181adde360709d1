"""Segments of a trajectory, and the text helpers that find tool calls in it.

Masks (README Eq. 1, docs/method.md §1). A rollout's response mask is 1 on the tokens the
policy generated and 0 on prompt, padding and inserted tool observations. Its maximal runs
of 1s are the assistant turns. With k runs:

    k = 0   no tool segment, no summary segment
    k = 1   summary only (a trajectory with no tool call is all summary)
    k >= 2  the LAST run is the summary segment; all earlier runs are the tool segment

so tool_mask + summary_mask == response_mask on every row. Known edge case, kept as the
released code has it: a rollout cut off by the turn or length cap ends on a tool-call turn,
and that last run is counted as the "summary" (its summary reward is then 0, see rewards.py).
`decision_mask` marks the summary turn's opening tokens, where the policy chose to stop calling
(README Eq. 15, `--decision-credit tool`).

Text (docs/method.md §1, "Reading policy text"). Policy turns call tools in the Hermes format,
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, with the calls of one parallel step
as a JSON list in one block. `strip_think`, `find_blocks` and `parse_block` (the one tool-call
parser, for the reward and the simulator) read policy text as the released reward does, linear
in the text and never raising; `encodable` makes untrusted text safe for a tokenizer.

    python -c "import segment, torch; print(segment.segment_masks(torch.tensor([[0,1,1,0,1]])))"
"""
from dataclasses import dataclass, field

import torch
from lib.inputs.text import loads

OPEN, CLOSE = "<tool_call>", "</tool_call>"


def segment_masks(response_mask):
    """Split a response mask into tool and summary masks (Eq. 1).

    response_mask: (B, T) of 0/1 (any dtype). Returns tool_mask, summary_mask (B, T) in the
    input's dtype and tool_present, summary_present (B,) bool.
    """
    m = response_mask.bool()                                   # (B, T)
    prev = torch.zeros_like(m)
    prev[:, 1:] = m[:, :-1]
    starts = m & ~prev                                         # (B, T) first token of each run
    pos = torch.arange(m.shape[1], device=m.device)            # (T,)
    last = torch.where(starts, pos, -1).amax(dim=1)            # (B,) start of the last run, -1 if none
    summary = m & (pos[None, :] >= last[:, None])              # (B, T)
    tool = m & ~summary                                        # (B, T)
    dtype = response_mask.dtype
    return tool.to(dtype), summary.to(dtype), tool.any(dim=1), summary.any(dim=1)


def run_index(response_mask):
    """The index of the run (assistant turn) each policy token belongs to: (B, T) long, 0 for
    the first run of a row, -1 off the mask. Turn k of the tool segment is run k (Eq. 1)."""
    m = response_mask.bool()                                   # (B, T)
    prev = torch.zeros_like(m)
    prev[:, 1:] = m[:, :-1]
    runs = (m & ~prev).long().cumsum(dim=1) - 1                # (B, T) runs started so far, minus one
    return torch.where(m, runs, -1)


DECISION_WINDOW = 16  # tokens read for the decision: "<tool_call>" is 11 characters, so 11 one-character tokens
                      # plus the one that departs, with room for leading whitespace (bounds untrusted text)


def decision_mask(response_mask, ids, decode, opener=OPEN):
    """The decision tokens d of README Eq. 15: (B, T) in response_mask's dtype, 1 on the opening
    tokens of the summary turn of each row that has a tool segment, 0 elsewhere.

    After a tool answer the next turn's tokens either open another call (`opener`) or start the
    answer. The decision is made where the turn's text (leading whitespace dropped) stops being
    a proper prefix of the opener: the turn's first k tokens, k the first count whose decoded
    text departs from the opener or completes it. One token where the opener is one token
    (Qwen2.5, the demo's BPE); SmolLM2 splits it into '<' 'tool' '_' 'call' '>', so a summary
    opening with '<b>' decides at 'b' and both tokens are the decision. ids: (B, T) the
    trajectories' ids; decode: ids -> text (the tokenizer's). At most DECISION_WINDOW tokens.
    """
    tool, summary, tool_present, _ = segment_masks(response_mask)
    out = torch.zeros_like(response_mask)                      # (B, T)
    s = summary.bool()
    first = s.long().argmax(dim=1)                             # (B,) first summary token
    size = s.sum(dim=1)                                        # (B,) the summary run's length
    for i in tool_present.nonzero().flatten().tolist():
        t, n = int(first[i]), min(int(size[i]), DECISION_WINDOW)
        out[i, t:t + decision_length(ids[i, t:t + n].tolist(), decode, opener)] = 1
    return out


def decision_length(turn, decode, opener=OPEN):
    """How many of a turn's opening ids (`turn`, a list) decide between `opener` and anything else."""
    for k in range(1, len(turn) + 1):
        text = decode(turn[:k]).lstrip()
        if text == opener or not opener.startswith(text):
            return k
    return len(turn)


def strip_think(text):
    """Drop think blocks (docs/method.md §2) as the release's `<think(?:ing)?>.*?</think(?:ing)?>` does,
    in linear time."""
    out, pos = [], 0
    while (a := _tag(text, "<think", pos)) and (b := _tag(text, "</think", a[1])):
        out.append(text[pos:a[0]])
        pos = b[1]
    out.append(text[pos:])
    return "".join(out)


def _tag(text, stem, pos):
    """(start, end) of the first `stem>` or `stemING>` at or after pos, else None."""
    while (i := text.find(stem, pos)) >= 0:
        j = i + len(stem)
        if text.startswith(">", j):
            return i, j + 1
        if text.startswith("ing>", j):
            return i, j + 4
        pos = i + 1
    return None


def find_blocks(text):
    """Bodies of the `<tool_call>…</tool_call>` blocks of `text`, in order, in linear time
    (what `re.findall(r"<tool_call>(.*?)</tool_call>", text, re.DOTALL)` gives)."""
    return [text[i + len(OPEN):j] for i, j in _block_spans(text)]


def drop_blocks(text):
    """`text` without its `<tool_call>…</tool_call>` blocks, in linear time."""
    out, pos = [], 0
    for i, j in _block_spans(text):
        out.append(text[pos:i])
        pos = j + len(CLOSE)
    return "".join(out) + text[pos:]


def _block_spans(text):
    pos = 0
    while (i := text.find(OPEN, pos)) >= 0 and (j := text.find(CLOSE, i + len(OPEN))) >= 0:
        yield i, j
        pos = j + len(CLOSE)


@dataclass
class Call:
    """One parsed tool call. `error` is "" when the call is well-formed and passed the
    simulator's checks; `failed` marks an answer that never came (the simulator's endpoint
    failed at the transport level), which is not a real tool response."""
    name: str = ""
    arguments: dict = field(default_factory=dict)
    error: str = ""
    failed: bool = False


def parse_block(body, string_args=True, drop_malformed=False, object_args=True):
    """Parse one block body into a list of Calls; never raises.

    A body is a JSON object (one call) or a JSON list (a parallel step). Each call has a
    non-empty string `name`; its arguments are `arguments or parameters or {}` (Python `or`,
    as the release: null, "", [] or {} fall through to the next) and must be a dict. With
    `string_args`, arguments given as a JSON string are decoded (the simulator accepts them);
    without it they are an error (the format reward's rule). A body that is not JSON gives one
    Call carrying the error; "[]" gives no call.

    `drop_malformed` reads the body as the release's Hermes parser (verl tool_parser.py), the
    simulator's default: the body is parsed as it is (not stripped), and what does not parse
    is no call rather than an error Call: a body that is not JSON, or JSON that is neither an
    object nor a list, and an item that is not an object or whose "name" is not a string (an
    empty name is kept). Its arguments are `arguments or parameters`, {} only when that is
    null or missing: a falsy `parameters` ("", [], 0) stays and is an argument error.
    Without `object_args`, arguments that are JSON but not an object are kept as they are
    (the release's agent loop sends them on; `--sim-parse release`).
    """
    try:
        obj = loads(body if drop_malformed else body.strip())
    except ValueError as e:
        return [] if drop_malformed else [Call(error=f"Invalid tool call format - {e}")]
    if not isinstance(obj, (dict, list)):
        return [] if drop_malformed else [Call(error="Invalid tool call format - expected a JSON object or list")]
    items = obj if isinstance(obj, list) else [obj]
    if drop_malformed:
        items = [item for item in items if isinstance(item, dict) and isinstance(item.get("name"), str)]
    return [_parse_call(item, string_args, drop_malformed, object_args) for item in items]


def _parse_call(item, string_args, keep_falsy, object_args=True):
    """One item as a Call; `keep_falsy`: only a null or missing `parameters` becomes {} (the release's)."""
    if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not (item["name"] or keep_falsy):
        return Call(error='Invalid tool call format - each call needs a non-empty string "name"')
    name = item["name"]
    args = item.get("arguments") or item.get("parameters")
    if args is None or not (args or keep_falsy):
        args = {}
    if isinstance(args, str) and string_args:
        try:
            args = loads(args)
        except ValueError as e:
            return Call(name, error=f"Invalid tool arguments format - {e}")
    if not isinstance(args, dict) and object_args:
        return Call(name, error=f"Invalid tool arguments format - arguments must be a JSON object, "
                                f"got {type(args).__name__}")
    return Call(name, args)
