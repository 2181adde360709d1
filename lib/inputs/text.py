"""Untrusted text made safe to parse and to tokenize, in linear time, never raising.

- `loads`: json.loads with a bound on size (MAX_JSON_CHARS) and nesting (MAX_JSON_DEPTH),
  so deep nesting, huge integers or megabytes of text are a ValueError with a short reason,
  not a RecursionError or minutes of parsing. Policy output, endpoint replies and data rows
  all go through it. The nesting bound (the release has none) is process-wide, as every
  parser of model output shares it: `set_json_depth(n)` (train.py and eval.py
  `--json-depth`) raises it up to MAX_SAFE_DEPTH, the deepest a parsed value can be for the
  rest of the pipeline (dataclasses.asdict, json.dumps, deepcopy: about two Python frames a
  level under Python's 1,000) to handle.
- `encodable`: a Python string can hold a lone surrogate (U+D800-U+DFFF: `json.loads('"\\ud800"')`
  makes one, so a tool call's name, an endpoint's JSON reply or a data row can carry it),
  which UTF-8, and therefore every HF tokenizer, cannot encode: the tokenizer raises
  TypeError. Every such code point (they are the only ones UTF-8 cannot encode) becomes
  U+FFFD, visibly, and is counted process-wide; `take_unencodable` returns the count since
  its last call (train.py logs it per RL step as `unencodable`). lib.inputs.chat.plain_ids, the one
  way text reaches a tokenizer, calls it.
"""
import json
import re
import threading


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
