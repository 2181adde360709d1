"""The Hermes tool format written out as plain chat text (SPEC §6), stdlib only.

A chat client of llm.py sends messages only: no `tools` field, no structured tool calls.
To let such a client (an OpenAI-compatible endpoint, or an in-process chat model) act as a
tool-calling agent, `as_text(messages, tools)` writes the conversation the way Qwen2.5's
chat template renders it:

- the tools go into the system message: its content (if any), a blank line, then
  `tools_prompt(tools)`, i.e. one JSON object per line inside <tools></tools> and the
  instruction to answer with `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`
  (without a system message no default text is added, as in bfcl-eval's Qwen handler);
- an assistant message's tool calls become its text: content, then one block per call;
- a run of tool messages becomes one user message of `<tool_response>` blocks.

The reply is plain text again; segment.py's parser reads its `<tool_call>` blocks.
data/make_world.py writes the shipped world's system prompts with `tools_prompt` too.

    python -c "import hermes; print(hermes.tools_prompt([{'type': 'function', 'function': {'name': 'f'}}]))"
"""
import json


# Qwen2.5-Instruct's chat template writes these around the tools (one JSON object per line);
# tiny.py's template is built from them too.
TOOLS_HEAD = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
              "You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
TOOLS_TAIL = ("\n</tools>\n\nFor each function call, return a json object with function name and "
              "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
              "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>")


def tools_prompt(tools):
    """The tool block Qwen2.5's chat template appends to the system message."""
    return TOOLS_HEAD + "".join("\n" + json.dumps(t, ensure_ascii=False) for t in tools) + TOOLS_TAIL


def call_text(call):
    """One tool call {"name", "arguments"} (or OpenAI's {"function": {...}}) as a Hermes block."""
    call = call.get("function", call)
    args = call.get("arguments") or {}
    args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    return f'<tool_call>\n{{"name": "{call["name"]}", "arguments": {args}}}\n</tool_call>'


def as_text(messages, tools):
    """Chat messages with tools, tool calls and tool results -> plain {role, content} messages."""
    out, prev = [], None
    if tools:
        system = messages[0]["content"] + "\n\n" if messages and messages[0]["role"] == "system" else ""
        out.append({"role": "system", "content": system + tools_prompt(tools)})
        messages = messages[1:] if system else messages
    for m in messages:
        content = m.get("content") or ""
        if m["role"] == "tool":
            block = f"<tool_response>\n{content}\n</tool_response>"
            if prev == "tool":  # consecutive results share one user turn
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block})
        else:
            calls = [call_text(c) for c in m.get("tool_calls") or []]
            out.append({"role": m["role"], "content": "\n".join(([content] if content else []) + calls)})
        prev = m["role"]
    return out
