"""Segments of a trajectory, and the text helpers that find tool calls in it.

Masks (SPEC §1, Eq. 1 in the README). A rollout's response mask is 1 on the tokens the
policy generated and 0 on prompt, padding and inserted tool observations. Its maximal runs
of 1s are the assistant turns. With k runs:

    k = 0   no tool segment, no summary segment
    k = 1   summary only (a trajectory with no tool call is all summary)
    k >= 2  the LAST run is the summary segment; all earlier runs are the tool segment

so tool_mask + summary_mask == response_mask on every row. Known edge case, kept as the
released code has it: a rollout cut off by the turn or length cap ends on a tool-call turn,
and that last run is counted as the "summary" (its summary reward is then 0, see rewards.py).

Text (SPEC §2.1, §5, §6). Policy turns call tools in the Hermes format,
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, with the calls of one parallel
step as a JSON list in one block. The helpers read policy text the way the released reward
(rl/slca_grpo/reward_fn.py) does, and every one of them is linear in the text and never raises:

- `strip_think` drops `<think>` or `<thinking>` up to the next `</think>` or `</thinking>`
  (the release pairs the tags freely: `<think>…</thinking>` is a block too); an unclosed
  opening tag leaves the rest of the text as it is, so a `<tool_call>` after an unclosed
  `<think>` is a call (answered, and scored in full), as in the release.
- `find_blocks` gives the body between each `<tool_call>` and the next `</tool_call>`.
- `parse_block` turns one body into `Call`s: malformed text becomes a `Call` whose `error`
  says what is wrong, ready to be shown to the policy ("Error: " + error) or counted as an
  invalid block. JSON goes through `loads`, so deep nesting, huge integers or megabytes of
  text are an error, not an exception. The nesting bound (MAX_JSON_DEPTH levels; the
  release has none) is process-wide, as every parser of model output shares it:
  `set_json_depth(n)` (train.py and eval.py `--json-depth`) raises it up to MAX_SAFE_DEPTH,
  the deepest a parsed value can be for the rest of the pipeline (dataclasses.asdict,
  json.dumps, deepcopy: about two Python frames a level under Python's 1,000) to handle it.
- `encodable` makes untrusted text safe to hand to a tokenizer. A Python string can hold a
  lone surrogate (U+D800-U+DFFF: `json.loads('"\\ud800"')` makes one, so a tool call's name,
  an endpoint's JSON reply or a data row can carry it), which UTF-8, and therefore every HF
  tokenizer, cannot encode: the tokenizer raises TypeError. Every such code point (they are
  the only ones UTF-8 cannot encode) becomes U+FFFD, visibly, and is counted process-wide;
  `take_unencodable` returns the count since its last call (train.py logs it per RL step as
  `unencodable`). rollout.plain_ids, the one way text reaches a tokenizer, calls it.

    python -c "import segment, torch; print(segment.segment_masks(torch.tensor([[0,1,1,0,1]])))"
"""
import json
import re
import threading
from dataclasses import dataclass, field

import torch

OPEN, CLOSE = "<tool_call>", "</tool_call>"
MAX_JSON_CHARS = 1_000_000  # bound on any JSON text parsed from the policy, an endpoint or a data row
MAX_JSON_DEPTH = 64         # bound on its nesting (json.loads recurses once per level)
MAX_SAFE_DEPTH = 256        # set_json_depth's highest: asdict of a 600-level value hits Python's recursion limit
_json_depth = [MAX_JSON_DEPTH]  # the bound loads() applies unless told otherwise (set_json_depth)
SURROGATE = re.compile("[\ud800-\udfff]")  # the code points a str can hold and UTF-8 cannot encode
REPLACEMENT = "\ufffd"      # U+FFFD REPLACEMENT CHARACTER: what an unencodable code point becomes
_unencodable, _lock = [0], threading.Lock()  # replaced so far in this process (simulator threads call too)


def encodable(text):
    """`text` with every lone surrogate replaced by U+FFFD, in one linear pass; counted."""
    text, n = SURROGATE.subn(REPLACEMENT, text)
    if n:
        with _lock:
            _unencodable[0] += n
    return text


def take_unencodable():
    """How many code points `encodable` replaced since the last call (then 0 again)."""
    with _lock:
        n, _unencodable[0] = _unencodable[0], 0
    return n


def set_json_depth(n):
    """Make `n` (1..MAX_SAFE_DEPTH) the nesting bound loads() applies by default, process-wide."""
    if not 1 <= n <= MAX_SAFE_DEPTH:
        raise ValueError(f"the JSON depth bound must be in 1..{MAX_SAFE_DEPTH}, not {n}")
    _json_depth[0] = n


def loads(text, max_chars=MAX_JSON_CHARS, max_depth=None):
    """json.loads for untrusted text, in bounded time and memory.

    Every failure is a ValueError with a short reason: too long, nested deeper than
    `max_depth` (default: the set_json_depth bound; checked before parsing, by one linear
    scan when the text holds more than `max_depth` opening brackets, so deep input never
    reaches the recursive decoder), not JSON, or an integer beyond Python's digit limit.
    """
    if not isinstance(text, (str, bytes, bytearray)):
        raise ValueError(f"expected text, got {type(text).__name__}")
    max_depth = _json_depth[0] if max_depth is None else max_depth
    if len(text) > max_chars:
        raise ValueError(f"JSON text of {len(text)} characters exceeds the limit of {max_chars}")
    if isinstance(text, (bytes, bytearray)):
        text = text.decode("utf-8", errors="replace")
    deep = text.count("[") + text.count("{") > max_depth  # else it cannot nest deeper: skip the slow scan
    for _, _, depth in structure(text) if deep else ():
        if depth > max_depth:
            raise ValueError(f"JSON nested deeper than {max_depth} levels")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:  # JSONDecodeError is a ValueError; so is a huge int
        raise ValueError(str(e)[:200]) from None


def structure(text):
    """(index, char, depth after it) for each bracket and comma of `text` outside JSON
    strings, in one linear scan."""
    depth, in_str, esc = 0, False, False
    for i, ch in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            yield i, ch, depth
        elif ch in "]}":
            depth -= 1
            yield i, ch, depth
        elif ch == ",":
            yield i, ch, depth


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


def strip_think(text):
    """Drop think blocks (SPEC §2), as the release's `<think(?:ing)?>.*?</think(?:ing)?>`, in linear time."""
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


def parse_block(body, string_args=True):
    """Parse one block body into a list of Calls; never raises.

    A body is a JSON object (one call) or a JSON list (a parallel step). Each call has a
    non-empty string `name`; its arguments are `arguments or parameters or {}` (Python `or`,
    as the release: null, "", [] or {} fall through to the next) and must be a dict. With
    `string_args`, arguments given as a JSON string are decoded (the simulator accepts them);
    without it they are an error (the format reward's rule). A body that is not JSON gives one
    Call carrying the error; "[]" gives no call.
    """
    try:
        obj = loads(body.strip())
    except ValueError as e:
        return [Call(error=f"Invalid tool call format - {e}")]
    if not isinstance(obj, (dict, list)):
        return [Call(error="Invalid tool call format - expected a JSON object or list")]
    return [_parse_call(item, string_args) for item in (obj if isinstance(obj, list) else [obj])]


def _parse_call(item, string_args):
    if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"]:
        return Call(error='Invalid tool call format - each call needs a non-empty string "name"')
    name = item["name"]
    args = item.get("arguments") or item.get("parameters") or {}
    if isinstance(args, str) and string_args:
        try:
            args = loads(args)
        except ValueError as e:
            return Call(name, error=f"Invalid tool arguments format - {e}")
    if not isinstance(args, dict):
        return Call(name, error=f"Invalid tool arguments format - arguments must be a JSON object, "
                                f"got {type(args).__name__}")
    return Call(name, args)
