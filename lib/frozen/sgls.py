"""SGLS's operational pieces (simulator.py reaches each by a line): the simulator LLM's framing
(PROMPT, the release's; `unwrap` of its reply), observation truncation, and the answer cache file."""
import json
import os
import warnings

from lib.inputs.text import loads

RESP_OPEN, RESP_CLOSE = "<tool_response>", "</tool_response>"

PROMPT = """You are a backend API server, not an assistant and not an agent. A client has sent you
a function call, written as <tool_call>[{{"name": ..., "parameters": {{...}}, "depend_on": []}}]</tool_call>.
Execute it and reply with the result the real API would return, as JSON.

Reply with exactly one block of this form and nothing else:
<tool_response>{{"key": "value"}}</tool_response>

Never write prose, explanations, markdown or code fences, and never write <tool_call>: you
answer calls, you do not make them. Make the result realistic and consistent with the call
and the tool's definition; if the call cannot succeed, return the JSON error the API would
return.

Examples:
<tool_call>[{{"name": "calculator", "parameters": {{"expression": "124 * 5"}}, "depend_on": []}}]</tool_call>
<tool_response>{{"result": 620}}</tool_response>
<tool_call>[{{"name": "get_weather", "parameters": {{"city": "Seattle"}}, "depend_on": []}}]</tool_call>
<tool_response>{{"temperature_c": 12, "condition": "rain"}}</tool_response>
{definition}
The call to answer:
{call}"""
PROMPT_FIELDS = ("definition", "call")  # PROMPT's placeholders: what a template of --sim-prompt must hold
DEFINITION = "\nTool definition:\n{}\n"



def definition_text(definition):
    """The tool definition as PROMPT shows it ("" with none, or one JSON cannot write: asked without it)."""
    if definition is None:
        return ""
    try:
        return DEFINITION.format(json.dumps(definition, indent=2, ensure_ascii=False))
    except (TypeError, ValueError, RecursionError):
        return ""


def truncate(text, max_chars):
    """Cut `text` in the middle to at most `max_chars`, keeping both ends around a marker."""
    if len(text) <= max_chars:
        return text
    cut = len(text) - max_chars
    while True:  # the marker's length depends on the number it shows
        marker = f"\n...[truncated {cut} chars]...\n"
        keep = max_chars - len(marker)
        if keep < 0:  # limit too small for a marker
            return text[:max_chars]
        if len(text) - keep == cut:
            return text[:keep - keep // 2] + marker + text[len(text) - keep // 2:]
        cut = len(text) - keep


def unwrap(reply):
    """Body of the last complete <tool_response> of `reply` (stripped), else ""."""
    end = reply.rfind(RESP_CLOSE)
    start = reply.rfind(RESP_OPEN, 0, end) if end >= 0 else -1
    return reply[start + len(RESP_OPEN):end].strip() if start >= 0 else ""


def json_text(text):
    """`text` stripped if it is a JSON object or list, else ""."""
    text = text.strip()
    try:
        return text if isinstance(loads(text), (dict, list)) else ""
    except ValueError:
        return ""


def load_cache(path):
    """The cache file's answers {key: response} and its count of torn or invalid lines, which are
    skipped (with a warning); a torn last line gets its newline, so the next append starts a line."""
    cache, bad, last = {}, 0, "\n"
    if not os.path.exists(path):
        return cache, bad
    with open(path, encoding="utf-8", errors="replace") as f:
        for last in f:
            if not last.strip():
                continue
            try:
                row = loads(last)
            except ValueError:
                row = None
            if isinstance(row, dict) and isinstance(row.get("key"), str) and isinstance(row.get("response"), str):
                cache.setdefault(row["key"], row["response"])
            else:
                bad += 1
    if not last.endswith("\n"):  # a torn last line: the next append must start a line of its own
        with open(path, "a", encoding="utf-8") as f:
            f.write("\n")
    if bad:
        warnings.warn(f"{path}: skipped {bad} torn or invalid lines")
    return cache, bad


def append_cache(path, key, answer):
    """One cache line, in one write."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"key": key, "response": answer}) + "\n")
