"""The Hermes tool format written out as plain chat text (docs/method.md §6, §9), stdlib + lib/inputs/chat.py.

A benchmark hands over chat messages with structured tool calls plus an OpenAI tool list.
`as_text(messages, tools, framing)` writes them as plain {role, content} messages, which
any chat template (or an OpenAI-compatible endpoint without tool support) then wraps:

- framing "qwen": the way Qwen2.5's chat template renders tools. The tools go into the
  system message: its content (if any), a blank line, then `lib.inputs.chat.tools_prompt(tools)` (one
  JSON object per line inside <tools></tools> and the instruction to answer with one
  `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` block per call). Without a
  system message no default text is added, as in bfcl-eval's Qwen handler.
- framing "toucan": the release's evaluation framing (its vLLM chat templates,
  eval/bfcl_v3 and eval/tau2_bench): one system message made of a head, TOUCAN_RULES
  (think in <think>, put the calls of a step as a JSON list in ONE <tool_call> block) and
  the tools inside <tools></tools>. The head is the benchmark's own system messages with
  keep_system=True (τ²: the domain policy), else "You are a helpful assistant." (BFCL: the
  release's template drops the items' system messages). Earlier tool calls are written
  back as one JSON-list block. TOUCAN_RULES is written here in the project's own words with
  the release's structure and format examples, not its exact text: `rules` replaces it, e.g.
with the release's text brought by the user (`python -m bench bfcl|tau2 --system-prompt FILE`).

In both framings an assistant message's tool calls become its text (content, then the
block(s)) and a run of tool messages becomes one user message of `<tool_response>` blocks.
The reply is plain text again; segment.py's parser reads its `<tool_call>` blocks.

    python -c "from bench import hermes; print(hermes.as_text([{'role': 'user', 'content': 'hi'}], [], 'toucan'))"
"""
import json

from lib.inputs.chat import with_tools

FRAMINGS = ("toucan", "qwen")
DEFAULT_HEAD = "You are a helpful assistant."  # the release's BFCL template starts with it
TOUCAN_RULES = (
    "# Instructions\n"
    "Reason about the request inside <think> and </think> before you answer.\n\n"
    "When tools are needed, answer with a JSON list of calls inside one pair of <tool_call></tool_call> tags:\n"
    "<tool_call>\n[{\"name\": <function-name>, \"arguments\": <args-json-object>}]\n</tool_call>\n"
    "Several calls in the list run in parallel. For a task of several steps, make the calls of one "
    "step, wait for their results, then continue.")


def call_text(call, as_list=False):
    """Tool calls as one Hermes block. `call` is one call {"name", "arguments"} (or OpenAI's
    {"function": {...}}); with as_list, a list of them written as one JSON list."""
    calls = call if as_list else [call]
    items = []
    for c in calls:
        c = c.get("function", c)
        args = c.get("arguments") or {}
        args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        items.append(f'{{"name": "{c["name"]}", "arguments": {args}}}')
    body = "[" + ", ".join(items) + "]" if as_list else items[0]
    return f"<tool_call>\n{body}\n</tool_call>"


def toucan_system(tools, head=DEFAULT_HEAD, rules=TOUCAN_RULES):
    """The release-style system message: head, the rules, the tools (one JSON per line)."""
    lines = "".join(json.dumps(t, ensure_ascii=False) + "\n" for t in tools)
    return f"{head}\n\n{rules}\n\n# Tools\n<tools>\n{lines}</tools>"


def as_text(messages, tools, framing="qwen", keep_system=True, rules=TOUCAN_RULES):
    """Chat messages with tools, tool calls and tool results -> plain {role, content} messages."""
    if framing not in FRAMINGS:
        raise ValueError(f"unknown framing {framing!r}; expected one of {FRAMINGS}")
    out, prev = [], None
    if framing == "toucan":
        system = [m.get("content") or "" for m in messages if m["role"] == "system"]
        head = "\n".join(system) if keep_system and system else DEFAULT_HEAD
        out.append({"role": "system", "content": toucan_system(tools, head, rules)})
        messages = [m for m in messages if m["role"] != "system"]
    elif tools:
        messages = with_tools(messages, tools)
    for m in messages:
        content = m.get("content") or ""
        if m["role"] == "tool":
            block = f"<tool_response>\n{content}\n</tool_response>"
            if prev == "tool":  # consecutive results share one user turn
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block})
        else:
            calls = m.get("tool_calls") or []
            if framing == "toucan":
                blocks = [call_text(calls, as_list=True)] if calls else []
            else:
                blocks = [call_text(c) for c in calls]
            out.append({"role": m["role"], "content": "\n".join(([content] if content else []) + blocks)})
        prev = m["role"]
    return out
