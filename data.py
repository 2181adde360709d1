"""Every data layout of SPEC §8 loaded into one `Task` (RL / eval) or one chat (SFT).

Reads `.parquet` (needs pyarrow, imported only then), `.jsonl` and `.json` (a list of rows,
or JSON lines). The layout is detected per row:

- SLCA release rows (verl layout): `prompt` (list of {role, content}; the system message
  already holds the tools), `tools` (JSON string, OpenAI list), `reward_model.ground_truth`
  = {allowed_tools, gold_tool_calls, question_content, tool_schemas, subset_name,
  reference_facts?}, `extra_info` = {parallel_type, tool_responses?}.
- Upstream Toucan-1.5M rows: `messages` (JSON string; roles user, assistant, tool_call,
  tool_response; a tool_call's content is a Python-literal dict whose `arguments` is a JSON
  string), `tools` or `available_tools`, `question`, `target_tools`, `subset_name`.
- SFT rows (`load_sft`): `conversations` = [{from: system|human|gpt, value}], or `messages`
  already in {role, content} form.

Simplifications, on purpose:
- Gold calls go through `rewards.normalize_gold` (SPEC §2.1), so every form (JSON string,
  nested, flat, bare names) ends up as nested steps of {"name", "arguments": dict}.
- A Toucan row becomes one task: the prompt is every message before the first assistant /
  tool_call message, gold is the tool calls made before the next user message (later turns
  of a multi-turn conversation are dropped), consecutive tool_call messages are one parallel
  step, and each tool_response is paired with the oldest unanswered call. Its allowed tools
  are the offered tools' names (`target_tools` only when no tools are offered).
- `parallel_type` missing from a row is derived from the gold steps (`parallel_type_of`).
- A malformed row raises ValueError "FILE row I: field 'F': why" (I counts rows; blank lines
  of a JSONL file are not rows). With skip_bad=True it is skipped instead; the returned
  list's `.skipped` holds the count, and one line naming it and the first error goes to stderr.

    python data.py data/world/rl.jsonl data/world/sft.jsonl    # load files, print a summary
"""
import ast
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from rewards import normalize_gold

PARALLEL_TYPES = ("single_step_single_tool", "single_step_parallel", "multi_step_all_serial",
                  "multi_step_has_parallel", "multi_step_all_parallel", "irrelevant")
SUBSETS = ("tool_call", "irrelevant")
SFT_ROLES = {"system": "system", "human": "user", "gpt": "assistant"}


@dataclass
class Task:
    messages: list[dict]      # prompt messages {role, content}: system (may already hold <tools>) then history up to the turn to answer
    tools: list[dict]         # OpenAI tool list: {"type": "function", "function": {"name", "description", "parameters"}}
    allowed_tools: list[str]
    gold: list[list[dict]]    # normalised nested steps; each call {"name": str, "arguments": dict}
    question: str
    subset: str = "tool_call"         # "tool_call" | "irrelevant"
    parallel_type: str = ""           # one of the six of SPEC §8, "" if unknown
    responses: list[dict] = field(default_factory=list)  # recorded tool responses: {"name", "arguments": dict, "response": str}
    facts: list[str] = field(default_factory=list)       # reference facts a correct summary must state
    source: str = ""          # file it came from
    row: int = -1             # index in that file


class Loaded(list):
    """A list of loaded rows that also says how many bad rows were skipped."""
    skipped = 0


class BadField(Exception):
    """A row field is malformed; the loader adds the file and row index."""

    def __init__(self, name, why):
        super().__init__(f"field '{name}': {why}")


def parallel_type_of(gold):
    """The SPEC §8 parallel type that nested gold steps have."""
    sizes = [len(step) for step in gold]
    if not sizes:
        return "irrelevant"
    if len(sizes) == 1:
        return "single_step_single_tool" if sizes[0] == 1 else "single_step_parallel"
    if max(sizes) == 1:
        return "multi_step_all_serial"
    return "multi_step_all_parallel" if min(sizes) > 1 else "multi_step_has_parallel"


def load_tasks(path, skip_bad=False):
    """RL / eval tasks from a verl-layout or Toucan file (see the module docstring)."""
    return _load(path, _task, skip_bad)


def load_sft(path, skip_bad=False):
    """SFT chats: one list of {role, content} per row."""
    return _load(path, _chat, skip_bad)


def _load(path, parse, skip_bad):
    out, errors = Loaded(), []
    for i, row in enumerate(_rows(path)):
        try:
            if isinstance(row, BadField):  # a line that was not JSON
                raise row
            if not isinstance(row, dict):
                raise BadField("<row>", f"expected an object, got {type(row).__name__}")
            item = parse(row)
        except BadField as e:
            err = ValueError(f"{path} row {i}: {e}")
            if not skip_bad:
                raise err from None
            errors.append(err)
            continue
        if isinstance(item, Task):
            item.source, item.row = str(path), i
        out.append(item)
    out.skipped = len(errors)
    if errors:
        print(f"warning: skipped {len(errors)} bad row(s) of {path}; first: {errors[0]}", file=sys.stderr)
    return out


def _rows(path):
    """Raw rows of a file. A JSON line that does not parse comes back as a BadField."""
    path = Path(path)
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise ImportError(f"reading {path} needs pyarrow: pip install pyarrow") from None
        return pq.read_table(path).to_pylist()
    if path.suffix not in (".jsonl", ".json"):
        raise ValueError(f"{path}: expected a .parquet, .jsonl or .json file")
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json" and text.lstrip().startswith("["):
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not a JSON array ({e})") from None
    rows = []
    for line in text.splitlines():  # JSON lines (.jsonl, or .json written line by line)
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            rows.append(BadField("<line>", f"not JSON ({e})"))
    return rows


# --- field helpers: each raises BadField naming the field ---------------------------------

def _json(value, name, kind):
    """`value`, parsed first when it is a JSON string; must be an instance of `kind`."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise BadField(name, f"not JSON ({e})") from None
    if not isinstance(value, kind):
        what = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise BadField(name, f"expected {what}, got {type(value).__name__}")
    return value


def _str(value, name):
    if not isinstance(value, str):
        raise BadField(name, f"expected a string, got {type(value).__name__}")
    return value


def _str_list(value, name):
    if isinstance(value, str) and not value.lstrip().startswith("["):
        return [s.strip() for s in value.split(",") if s.strip()]  # "a, b" form
    value = _json(value, name, list)
    for x in value:
        _str(x, name)
    return value


def _messages(value, name, roles):
    value = _json(value, name, list)
    for j, m in enumerate(value):
        if not isinstance(m, dict) or m.get("role") not in roles:
            raise BadField(f"{name}[{j}]", f"expected a message with a role in {sorted(roles)}")
        _str(m.get("content"), f"{name}[{j}].content")
    return [{"role": m["role"], "content": m["content"]} for m in value]


def _tools(value, name):
    """An OpenAI tool list; bare function dicts are wrapped as {"type": "function", ...}."""
    out = []
    for j, t in enumerate(_json(value, name, list)):
        fn = t.get("function", t) if isinstance(t, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise BadField(f"{name}[{j}]", "expected a tool with a function name")
        out.append({"type": "function", "function": fn})
    return out


def _gold(value, name):
    """Gold calls in any SPEC §2.1 form; a string that is not JSON or a non-list is an error."""
    if value is None or value == "":
        return []
    return normalize_gold(_json(value, name, (list, dict)))


def _responses(value, name):
    out = []
    for j, r in enumerate(_json(value, name, list)):
        if not isinstance(r, dict):
            raise BadField(f"{name}[{j}]", "expected an object")
        resp = r.get("response", "")
        out.append({"name": _str(r.get("name"), f"{name}[{j}].name"),
                    "arguments": _json(r.get("arguments", {}), f"{name}[{j}].arguments", dict),
                    "response": resp if isinstance(resp, str) else json.dumps(resp, ensure_ascii=False)})
    return out


def _names(tools):
    return [t["function"]["name"] for t in tools]


def _subset(value, name, gold):
    if value in (None, ""):
        return "tool_call" if gold else "irrelevant"
    if value not in SUBSETS:
        raise BadField(name, f"expected one of {SUBSETS}, got {value!r}")
    return value


def _parallel_type(value, name, gold):
    if value in (None, ""):
        return parallel_type_of(gold)
    if value not in PARALLEL_TYPES:
        raise BadField(name, f"expected one of {PARALLEL_TYPES}, got {value!r}")
    return value


# --- row parsers ----------------------------------------------------------------------------

def _task(row):
    if "prompt" in row or "reward_model" in row:
        return _verl_task(row)
    if "messages" in row:
        return _toucan_task(row)
    raise BadField("<row>", "unknown layout: expected 'prompt'/'reward_model' (verl) or 'messages' (Toucan)")


def _verl_task(row):
    messages = _messages(row.get("prompt"), "prompt", {"system", "user", "assistant", "tool"})
    rm = _json(row.get("reward_model"), "reward_model", dict)
    gt = _json(rm.get("ground_truth"), "reward_model.ground_truth", dict)
    extra = _json(row.get("extra_info") or {}, "extra_info", dict)
    if row.get("tools") is not None:
        tools = _tools(row["tools"], "tools")
    else:
        tools = _tools(gt.get("tool_schemas") or [], "reward_model.ground_truth.tool_schemas")
    gold = _gold(gt.get("gold_tool_calls"), "reward_model.ground_truth.gold_tool_calls")
    allowed = gt.get("allowed_tools")
    users = [m["content"] for m in messages if m["role"] == "user"]
    question = gt.get("question_content") or (users[-1] if users else "")
    return Task(
        messages=messages,
        tools=tools,
        allowed_tools=_names(tools) if allowed is None else _str_list(allowed, "reward_model.ground_truth.allowed_tools"),
        gold=gold,
        question=_str(question, "reward_model.ground_truth.question_content"),
        subset=_subset(gt.get("subset_name"), "reward_model.ground_truth.subset_name", gold),
        parallel_type=_parallel_type(extra.get("parallel_type"), "extra_info.parallel_type", gold),
        responses=_responses(extra.get("tool_responses") or [], "extra_info.tool_responses"),
        facts=_str_list(gt.get("reference_facts") or [], "reward_model.ground_truth.reference_facts"),
    )


def _toucan_task(row):
    messages = _messages(row["messages"], "messages",
                         {"system", "user", "assistant", "tool_call", "tool_response"})
    first = next((j for j, m in enumerate(messages) if m["role"] in ("assistant", "tool_call")),
                 len(messages))
    prompt = messages[:first]
    if not any(m["role"] == "user" for m in prompt):
        raise BadField("messages", "no user message before the first assistant / tool_call message")
    gold, responses, pending = [], [], []
    prev = None
    for j, m in enumerate(messages[first:], start=first):
        if m["role"] == "user":  # the next turn of a multi-turn conversation: stop
            break
        if m["role"] == "tool_call":
            call = _toucan_call(m["content"], f"messages[{j}].content")
            if prev != "tool_call":  # a new run of consecutive calls is a new step
                gold.append([])
            gold[-1].append(call)
            pending.append(call)
        elif m["role"] == "tool_response" and pending:
            call = pending.pop(0)
            responses.append({**call, "response": m["content"]})
        prev = m["role"]
    key = "tools" if row.get("tools") is not None else "available_tools"
    tools = _tools(row.get(key) or [], key)
    gold = normalize_gold(gold)
    question = row.get("question") or next(m["content"] for m in prompt if m["role"] == "user")
    return Task(
        messages=prompt,
        tools=tools,
        allowed_tools=_names(tools) or _str_list(row.get("target_tools") or [], "target_tools"),
        gold=gold,
        question=_str(question, "question"),
        # Toucan subsets are named e.g. "single-turn-original", "irrelevant", "multi-turn"
        subset="irrelevant" if "irrelevan" in str(row.get("subset_name")) or not gold else "tool_call",
        parallel_type=parallel_type_of(gold),
        responses=responses,
    )


def _toucan_call(content, name):
    """A Toucan tool_call: a Python-literal dict (never eval'd) whose arguments are JSON."""
    try:
        call = ast.literal_eval(content) if isinstance(content, str) else content
    except (ValueError, SyntaxError) as e:
        raise BadField(name, f"not a Python literal ({e})") from None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        raise BadField(name, "expected a dict with a string 'name'")
    args = _json(call.get("arguments") or {}, f"{name}.arguments", dict)
    return {"name": call["name"], "arguments": args}


def _chat(row):
    if "conversations" in row:
        turns = _json(row["conversations"], "conversations", list)
        out = []
        for j, t in enumerate(turns):
            if not isinstance(t, dict) or t.get("from") not in SFT_ROLES:
                raise BadField(f"conversations[{j}].from", f"expected one of {sorted(SFT_ROLES)}")
            out.append({"role": SFT_ROLES[t["from"]], "content": _str(t.get("value"), f"conversations[{j}].value")})
        return out
    if "messages" in row:
        return _messages(row["messages"], "messages", {"system", "user", "assistant", "tool"})
    raise BadField("<row>", "expected 'conversations' or 'messages'")


if __name__ == "__main__":
    for p in sys.argv[1:]:  # a file whose name starts with "sft" holds SFT chats
        if Path(p).name.startswith("sft"):
            chats = load_sft(p)
            print(f"{p}: {len(chats)} SFT chats, {sum(len(c) for c in chats)} messages")
        else:
            tasks = load_tasks(p)
            kinds = {}
            for t in tasks:
                kinds[t.parallel_type] = kinds.get(t.parallel_type, 0) + 1
            print(f"{p}: {len(tasks)} tasks, {kinds}")
