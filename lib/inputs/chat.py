"""The one special-token-safe encoder: chat templates, tool blocks and plain text as ids.

Untrusted text (a tool response, a data row, the policy's own output) may contain a
special-token string such as `<|im_end|>`; tokenizing it the usual way would turn it into
the special id and let the text close a turn or open a system message. Here:

- `plain_ids`: untrusted texts as plain text (special-token strings stay ordinary ids), made
  `encodable` first. Every untrusted text the project tokenizes goes through it.
- `mark` / `render` / `template_ids` / `chat_ids`: a chat template rendered over messages
  whose special-token strings were swapped for private-use placeholders, so only the
  template's own markup becomes special ids.
- `tools_prompt` / `with_tools`: Qwen2.5's tool block, written into the system message for a
  template that ignores `tools` (`renders_tools` probes it once per tokenizer).
"""
import json
import re

from jinja2 import TemplateError

from lib.inputs.text import encodable


# Qwen2.5-Instruct's chat template writes these around the tools (one JSON object per line);
# CHAT_TEMPLATE below, tools/make_world.py's system prompts and bench/hermes.py use them.
TOOLS_HEAD = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
              "You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
TOOLS_TAIL = ("\n</tools>\n\nFor each function call, return a json object with function name and "
              "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
              "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>")


def tools_prompt(tools):
    """The tool block Qwen2.5's chat template appends to the system message."""
    return TOOLS_HEAD + "".join("\n" + json.dumps(t, ensure_ascii=False) for t in tools) + TOOLS_TAIL


def with_tools(messages, tools):
    """`messages` with the tool block in the system message, the way Qwen2.5's template and the
    release's pre-rendered system prompts carry it: after the system text and a blank line, or
    as the whole system message when there is none (as lib/inputs/data.py gives it to SFT rows)."""
    if messages and messages[0]["role"] == "system":
        return [{**messages[0], "content": messages[0]["content"] + "\n\n" + tools_prompt(tools)}, *messages[1:]]
    return [{"role": "system", "content": tools_prompt(tools)}, *messages]


MARK = 0xF0000       # first code point of Unicode plane 15 (private use): placeholders for special tokens


# ---------------------------------------------------------------------------------------------
# ids: prompts and tool turns
def specials(tok):
    """{special-token string: its placeholder}, longest string first; placeholders are private-use
    code points from MARK on."""
    special = sorted((t.content for t in tok.added_tokens_decoder.values() if t.special), key=len, reverse=True)
    return {s: chr(MARK + k) for k, s in enumerate(special)}


def _placeholders(marks):
    return re.compile(f"[{chr(MARK)}-{chr(MARK + max(len(marks) - 1, 0))}]")


def mark(tok, x):
    """`x` (a string, or dicts and lists of them, keys included) with each special-token string
    swapped for its placeholder. Placeholders already in `x` are dropped, so data cannot forge one."""
    marks = specials(tok)
    find = re.compile("|".join(map(re.escape, marks)) or "(?!)")  # (?!) matches nothing
    placeholder = _placeholders(marks)

    def walk(x):
        if isinstance(x, str):
            return find.sub(lambda m: marks[m[0]], placeholder.sub("", x))
        if isinstance(x, dict):
            return {walk(k): walk(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [walk(v) for v in x]
        return x
    return walk(x)


def render(tok, messages, tools=None, add_generation_prompt=True):
    """The chat template's text for `mark`ed messages and tools: every special-token string left in
    it is the template's own markup."""
    return tok.apply_chat_template(mark(tok, messages), tools=mark(tok, tools), tokenize=False,
                                   add_generation_prompt=add_generation_prompt)


def plain_ids(tok, texts):
    """Ids of each untrusted text as plain text, in one batched tokenizer call: made encodable
    first (lib.inputs.text.encodable: a lone surrogate becomes U+FFFD instead of a TypeError out of the
    tokenizer), and a special-token string in it encoded as text. Every untrusted text this
    module, lib/training/sft.py and bench/models.py tokenize goes through here."""
    if not texts:
        return []
    return tok([encodable(t) for t in texts], add_special_tokens=False, split_special_tokens=True)["input_ids"]


def template_ids(tok, texts):
    """Ids of each text made by `render` (or `mark`): its special-token strings become special
    ids, the rest, placeholders turned back into their strings, is `plain_ids`."""
    marks = specials(tok)
    unmark = {m: s for s, m in marks.items()}
    find, placeholder = "|".join(map(re.escape, marks)) or "(?!)", _placeholders(marks)
    parts = [re.split(f"({find})", t) for t in texts]  # odd pieces: the template's special tokens
    plain = iter(plain_ids(tok, [placeholder.sub(lambda m: unmark.get(m[0], ""), x) for p in parts for x in p[::2]]))
    return [[i for k, x in enumerate(p) for i in ([tok.convert_tokens_to_ids(x)] if k % 2 else next(plain))]
            for p in parts]


def chat_ids(tok, messages, tools=None, add_generation_prompt=True):
    """`tok.apply_chat_template(messages, tools)` as ids, where a special-token string inside a
    message or a tool definition is encoded as plain text: only the template's own markup can
    become special ids. Lone surrogates anywhere in the text become U+FFFD (`plain_ids`)."""
    return template_ids(tok, [render(tok, messages, tools, add_generation_prompt)])[0]


PROBE = "slca_probe_tool"  # a tool name no template writes unless it renders the tools it is given


def renders_tools(tok):
    """Whether the chat template writes the `tools` it is given (Qwen2.5's does; SmolLM2's ChatML
    template ignores them); probed once per tokenizer and template."""
    seen = getattr(tok, "_renders_tools", None)
    if seen is None or seen[0] != tok.chat_template:
        tool = {"type": "function", "function": {"name": PROBE, "parameters": {"type": "object", "properties": {}}}}
        try:
            text = tok.apply_chat_template([{"role": "user", "content": "?"}], tools=[tool], tokenize=False)
        except TemplateError:  # a template that refuses tools renders none
            text = ""
        tok._renders_tools = seen = (tok.chat_template, PROBE in text)
    return seen[1]
