"""Every data layout of docs/method.md §8 loaded into one `Task` (RL / eval) or one chat (SFT).

Files: `.parquet` (needs pyarrow, imported only then; read batch by batch), `.jsonl`, and
`.json` (one JSON array of rows, or JSON lines). Text is read as UTF-8 with or without a BOM
and split on "\\n" only (a U+2028 inside a string is text, not a line break). The layout is
detected per row:

- SLCA release RL / eval rows (verl layout, `toucan_toolcall_rl.parquet`,
  `toucan_eval_4k_unified.parquet`, `data/samples/toucan_toolcall_rl.preview.jsonl`):
  `prompt` (list of {role, content}; the system message already holds the tools), `tools`
  (JSON string, OpenAI list), `reward_model.ground_truth` = {allowed_tools, gold_tool_calls,
  question_content, tool_schemas, subset_name, reference_facts?}, `extra_info` =
  {parallel_type?, tool_responses?}.
- Upstream Toucan-1.5M rows, and the release's LLaMA-Factory SFT JSON (what its
  convert_sft_parquet_to_json.py writes, and `data/samples/toucan_toolcall_sft.preview.jsonl`):
  `messages` (JSON string or list; roles user, assistant, tool_call, tool_response; one
  tool_call message per call; its content a Python-literal dict `{'name': .., 'arguments':
  '<JSON string>'}`, never eval'd, or the same in JSON, or a JSON list of calls), `tools`
  or `available_tools`, and for Toucan `question`, `target_tools`, `subset_name`.
- SFT rows of the release's raw parquet (`toucan_toolcall_sft_split_42k.parquet`):
  `conversations` = [{from: system|human|gpt, value}], the <tools>, <tool_call> and
  <tool_response> markup inside the text; or `messages` already in {role, content} form.

`load_tasks` reads the first two (an SFT JSON row is also a Toucan row); `load_sft` reads
the last two and the LLaMA-Factory JSON. An SFT chat is a list of {role, content} in the
Hermes text form of the shipped world (data/world/sft.jsonl): a run of tool_call messages is
one assistant turn holding ONE `<tool_call>\\n[...]\\n</tool_call>` block with the list of
{"name", "arguments"}; a run of tool_response messages is one user turn of
`<tool_response>\\n...\\n</tool_response>` blocks; when no system message holds <tools>, the
row's tools go into the system message as `lib.inputs.chat.tools_prompt` writes them (after the system
text, if any). Consecutive turns of one role (an assistant's text and the call after it)
are one turn, their texts joined with "\n" (`turns="merge"`, what rollouts see).
`turns="release"` applies the rule of LLaMA-Factory, which ran the release's SFT (its
sharegpt converter with the release's dataset_info.json tags): after the system message the
roles must alternate user-side (user, tool_response) and assistant-side (assistant,
tool_call), starting with the user and ending with the assistant, else the row is skipped as
abnormal. So every row with a text before a call, a parallel step (the release's JSON writes
one tool_call message per call) or two tool responses in a row is dropped, and counted
(`Loaded.abnormal`, warned). As shipped, the release's JSON holds `messages` as a JSON string,
which that converter would iterate character by character: the release's own SFT input could
not have been exactly this file.

Simplifications, on purpose (flags):
- Gold calls go through `lib.inputs.data.normalize_gold` (docs/method.md §2.1), so every form (JSON string,
  nested, flat, bare names) ends up as nested steps of {"name", "arguments": dict}.
- A Toucan row becomes one task: the prompt is every message before the first assistant /
  tool_call message, gold is the tool calls made before the next user message (later turns
  of a multi-turn conversation are dropped), consecutive tool_call messages are one parallel
  step, and each tool_response is paired with the oldest unanswered call. Its allowed tools
  are the offered tools' names (`target_tools` only when no tools are offered).
- `parallel_type` missing from a row is derived from the gold steps (`parallel_type_of`).
- In an SFT chat, consecutive user turns, and consecutive assistant turns, are joined with
  "\\n": the assistant text before a tool call and the call are one turn, as Qwen's template
  renders an assistant message with tool_calls (rollout.py ends a trajectory at a turn
  without a call, so a split turn would teach the policy to stop early). The release's
  LLaMA-Factory config keeps them as separate messages.

Errors. Every problem is a `DataError` (a ValueError) whose text is one line:
- a bad row: "FILE row N: field 'F': why" (or "FILE row N: Kind: why" for any other
  failure), N being the 1-based line of a JSONL file (blank lines count, and are skipped) or
  the 1-based row of a parquet file or JSON array. Whatever goes wrong inside a row (not
  JSON, not UTF-8, nested too deep, a huge integer, a wrong type) is that row's error. With
  skip_bad=True bad rows are skipped instead: the returned list's `.skipped` holds the
  count, and one line naming it and the first error goes to stderr.
- a file that cannot be read, or a JSON array that is not one (never closed, text after
  it): "FILE: why".
- a file with no usable row (empty, or every row bad): "FILE: no usable rows (...)".
- `release_files()` when a split is neither in the Hugging Face cache nor downloadable: one
  line naming the `hf download` command (FETCH) that fetches the splits.
JSON goes through `lib.inputs.text.loads` (bounded length and depth); a row is at most
MAX_ROW_CHARS characters, a tool_call message at most lib.inputs.text.MAX_JSON_CHARS.

Fetching (docs/method.md §8). `release_files()` gives the local paths of the release's RL, eval and
SFT (42k split, the main table's) parquet files from the Hugging Face dataset
YanZhanPKU/SLCA-GRPO-Datasets: from the local cache when they are there (no network),
else downloaded with huggingface_hub.

Prompt length. The release drops prompts over 24,576 tokens; `drop_long(tasks, n_tokens)`
does the same with the caller's token counter and says how many went.

RL order. `data_order(n, epochs, seed)` is the RL prompts' order over all epochs, one seeded
shuffle per epoch (train.py saves it in every checkpoint).

    python -m lib.inputs.data data/world/rl.jsonl data/world/sft.jsonl    # load files, print a summary
    python -m lib.inputs.data release                                      # fetch the release's splits, summarize
"""
import ast
import json
import logging
import random
import re
import sys
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path

from lib.inputs.text import MAX_JSON_CHARS, MAX_JSON_DEPTH, loads, structure

PARALLEL_TYPES = ("single_step_single_tool", "single_step_parallel", "multi_step_all_serial",
                  "multi_step_has_parallel", "multi_step_all_parallel", "irrelevant")
SUBSETS = ("tool_call", "irrelevant")
SFT_ROLES = {"system": "system", "human": "user", "gpt": "assistant"}  # ShareGPT `from` -> role
TURNS = ("merge", "release")  # SFT chats: same-role turns joined, or LLaMA-Factory's rule (non-alternating rows dropped)
USER_SIDE = {"user", "tool_response", "tool", "human"}      # LLaMA-Factory's odd positions (user, observation)
ASSISTANT_SIDE = {"assistant", "tool_call", "gpt"}          # its even positions (assistant, function_call)
# bound on one row's JSON text and on any JSON string in it: linear time, a few hundred MB at
# worst, and far above any released row (the preview rows are under 20 KB)
MAX_ROW_CHARS = 32_000_000
MAX_PROMPT_TOKENS = 24_576  # the release's max_prompt_length: longer prompts are dropped (docs/method.md §6)
JSON_SPACE = " \t\r\n"  # JSON's whitespace: a line of only these is blank (str.strip() would also eat U+2028, \x1c, ...)
BAD_UTF8 = re.compile("[\udc80-\udcff]")  # what decoding with errors="surrogateescape" leaves for a bad byte

# the release's splits on the Hugging Face hub (docs/method.md §8): the dataset repository keeps them under data/
# (the release's README fetches them with --include "data/*.parquet")
RELEASE = "YanZhanPKU/SLCA-GRPO-Datasets"
RELEASE_FILES = {"rl": "data/toucan_toolcall_rl.parquet", "eval": "data/toucan_eval_4k_unified.parquet",
                 "sft": "data/toucan_toolcall_sft_split_42k.parquet"}
FETCH = (f'hf download {RELEASE} --repo-type dataset --include "data/*.parquet" (into the Hugging Face cache, '
         f'where the next run finds them; with --local-dir DIR, pass --data DIR/{RELEASE_FILES["rl"]} '
         f'--eval-data DIR/{RELEASE_FILES["eval"]} --sft-data DIR/{RELEASE_FILES["sft"]})')


@dataclass
class Task:
    messages: list[dict]      # prompt messages {role, content}: system (may already hold <tools>) then history up to the turn to answer
    tools: list[dict]         # OpenAI tool list: {"type": "function", "function": {"name", "description", "parameters"}}
    allowed_tools: list[str]
    gold: list[list[dict]]    # normalised nested steps; each call {"name": str, "arguments": dict}
    question: str
    subset: str = "tool_call"         # "tool_call" | "irrelevant"
    parallel_type: str = ""           # one of the six of docs/method.md §8, "" if unknown
    responses: list[dict] = field(default_factory=list)  # recorded tool responses: {"name", "arguments": dict, "response": str}
    facts: list[str] = field(default_factory=list)       # reference facts a correct summary must state
    bonus: str = ""           # the diagnostic world's marked extra call (a tool the gold does not ask for), "" if none
    bonus_args: dict = field(default_factory=dict)  # --wrong's world: the marked call's wrong arguments ({}: any call of it)
    source: str = ""          # file it came from
    row: int = -1             # its 1-based row there, as errors count them (JSONL: the line)


class Loaded(list):
    """A list of loaded rows that also says how many bad rows were skipped, and how many rows
    the layout's own rule skipped (`abnormal`: load_sft's turns="release")."""
    skipped = abnormal = 0


class DataError(ValueError):
    """A data file, one of its rows, or the release download cannot be used; the text is one line."""


class BadField(Exception):
    """A row field is malformed; the loader adds the file and row."""

    def __init__(self, name, why):
        super().__init__(f"field '{name}': {why}")


def parallel_type_of(gold):
    """The docs/method.md §8 parallel type that nested gold steps have."""
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


def load_sft(path, skip_bad=False, turns=TURNS[0]):
    """SFT chats: one list of {role, content} per row; `turns` as in the module docstring."""
    assert turns in TURNS
    return _load(path, lambda row: _chat(row) if turns == "merge" or _alternates(row) else None, skip_bad)


def task_of(row):
    """One RL row (a dict in the verl or Toucan layout) as a Task: what load_tasks makes of each row, for
    a caller that holds rows rather than a file (integrations/verl.py's reward function). A bad field is a
    DataError naming it."""
    try:
        return _task(row)
    except Exception as e:  # noqa: BLE001 -- as _load: whatever goes wrong inside a row is that row's error
        raise DataError(f"row: {_why(e)}") from None


def drop_long(items, n_tokens, max_tokens=MAX_PROMPT_TOKENS):
    """(items whose prompt is at most max_tokens long, how many were dropped).

    `n_tokens(item)` is the prompt's length as the policy will see it, e.g.
    `lambda t: len(rollout.prompt_ids(tok, t))` (the release counts the chat-templated prompt).
    """
    kept = [x for x in items if n_tokens(x) <= max_tokens]
    return kept, len(items) - len(kept)


def data_order(n, epochs, seed):
    """The RL prompts' order over all epochs: one seeded shuffle of range(n) per epoch, end to
    end (the first epoch's is the order one epoch always had). Saved in every checkpoint, so a
    resumed run takes the same prompts in every epoch."""
    rng, order = random.Random(seed), []
    for _ in range(epochs):
        perm = list(range(n))
        rng.shuffle(perm)
        order += perm
    return order


def release_files():
    """Local paths {"rl", "eval", "sft"} of the release's splits, from the Hugging Face cache
    (no network needed then) or downloaded into it; DataError naming FETCH otherwise."""
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise DataError(f"fetching the release needs huggingface_hub (pip install huggingface_hub), "
                        f"then: {FETCH}") from None
    log = logging.getLogger("huggingface_hub")
    level = log.level
    log.setLevel(logging.ERROR)  # offline, its retry warnings would bury the one line below
    try:
        paths = {}
        for key, name in RELEASE_FILES.items():
            for cached_only in (True, False):
                try:
                    paths[key] = hf_hub_download(RELEASE, name, repo_type="dataset", local_files_only=cached_only)
                    break
                except Exception as e:  # not cached; offline, hub unreachable, no such file, ...
                    why = type(e).__name__
            else:
                raise DataError(f"{RELEASE}/{name} is not in the Hugging Face cache and could not be "
                                f"downloaded ({why}); fetch the splits with: {FETCH}")
        return paths
    finally:
        log.setLevel(level)


# --- files and rows -------------------------------------------------------------------------

def _load(path, parse, skip_bad):
    out, errors, n, abnormal = Loaded(), [], 0, 0
    for i, row in _rows(path):
        n += 1
        try:
            if isinstance(row, BadField):  # a row that was not readable JSON
                raise row
            if not isinstance(row, dict):
                raise BadField("<row>", f"expected an object, got {type(row).__name__}")
            item = parse(row)
        except Exception as e:  # noqa: BLE001 -- whatever goes wrong inside a row is that row's error
            err = f"{path} row {i}: {_why(e)}"
            if not skip_bad:
                raise DataError(err) from None
            errors.append(err)
            continue
        if item is None:  # a row the layout's own rule skips (load_sft's turns="release")
            abnormal += 1
            continue
        if isinstance(item, Task):
            item.source, item.row = str(path), i
        out.append(item)
    out.skipped, out.abnormal = len(errors), abnormal
    if abnormal:
        print(f"warning: skipped {abnormal} of {n} chats of {path} whose turns do not alternate "
              f"(LLaMA-Factory's rule, --sft-turns release)", file=sys.stderr)
    if not out:
        detail = f"all {n} rows bad; first: {errors[0]}" if errors else "no rows"
        raise DataError(f"{path}: no usable rows ({detail})")
    if errors:
        print(f"warning: skipped {len(errors)} bad row(s) of {path}; first: {errors[0]}", file=sys.stderr)
    return out


def _why(e):
    """One line for an exception: a BadField's own text, else its kind and message."""
    why = str(e) if isinstance(e, BadField) else f"{type(e).__name__}: {e}"
    return why.replace("\r", " ").replace("\n", " ")[:500]


def _rows(path):
    """(row number, raw row) for each row of a file; a row that is not readable JSON comes
    back as a BadField, so the loader can name or skip it."""
    path = Path(path)
    if path.suffix not in (".parquet", ".jsonl", ".json"):
        raise DataError(f"{path}: expected a .parquet, .jsonl or .json file")
    if path.suffix == ".parquet":
        return _parquet_rows(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise DataError(f"{path}: cannot read it ({e.strerror or e})") from None
    text = data.decode("utf-8-sig", errors="surrogateescape")  # a bad byte stays visible, per row
    if path.suffix == ".json" and text.lstrip(JSON_SPACE).startswith("["):
        return enumerate(_array_rows(path, text), start=1)
    return ((i, _row(line)) for i, line in enumerate(text.split("\n"), start=1) if line.strip(JSON_SPACE))


def _parquet_rows(path):
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(f"reading {path} needs pyarrow: pip install pyarrow") from None
    i = 0
    try:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=1024):
            for row in batch.to_pylist():
                i += 1
                yield i, row
    except Exception as e:  # noqa: BLE001 -- missing, unreadable or corrupt: one line naming the file
        raise DataError(f"{path}: cannot read it as parquet ({_why(e)})") from None


def _row(text):
    """One row's JSON text -> the parsed value, or a BadField saying why it is not one."""
    bad = BAD_UTF8.search(text)
    if bad:
        return BadField("<row>", f"not UTF-8 text (byte 0x{ord(bad.group()) - 0xDC00:02X} at character {bad.start() + 1})")
    try:
        return loads(text, max_chars=MAX_ROW_CHARS)
    except ValueError as e:
        return BadField("<row>", f"not JSON ({e})")


def _array_rows(path, text):
    """The rows of a JSON array file. The whole array is parsed at once; if that fails, the
    items are cut apart by one scan (strings skipped, brackets counted) and parsed one by
    one, so that a bad item is its own row's error and does not hide the others."""
    if not BAD_UTF8.search(text):
        try:
            return loads(text, max_chars=len(text), max_depth=MAX_JSON_DEPTH + 1)
        except ValueError:
            pass
    items, start = [], None
    for i, ch, depth in structure(text):
        if ch in "[{" and depth == 1:
            start = i + 1
        elif (ch in "]}" and depth == 0) or (ch == "," and depth == 1):  # the end of an item
            items.append(text[start:i])
            start = i + 1
        if ch in "]}" and depth == 0:
            if text[i + 1:].strip():
                raise DataError(f"{path}: text after the JSON array's closing bracket")
            if len(items) == 1 and not items[0].strip(JSON_SPACE):  # "[]"
                items = []
            return [_row(item) for item in items]
    raise DataError(f"{path}: the JSON array is never closed (after {len(items)} rows)")


# --- field helpers: each raises BadField naming the field ---------------------------------

def _json(value, name, kind):
    """`value`, parsed first when it is a JSON string; must be an instance of `kind`."""
    if isinstance(value, str):
        try:
            value = loads(value, max_chars=MAX_ROW_CHARS)
        except ValueError as e:
            raise BadField(name, f"not JSON ({e})") from None
    if not isinstance(value, kind):
        what = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise BadField(name, f"expected {what}, got {type(value).__name__}")
    return value


def _plain(value, name):
    """`value` when JSON can write it back (prompts and the simulator serialise it); a parquet
    value such as a timestamp cannot be, and is this field's error."""
    try:
        json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as e:
        raise BadField(name, f"holds a value JSON cannot write ({e})") from None
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
        out.append({"type": "function", "function": _plain(fn, f"{name}[{j}]")})
    return out


def _gold(value, name):
    """Gold calls in any docs/method.md §2.1 form; a string that is not JSON or a non-list is an error."""
    if value is None or value == "":
        return []
    return normalize_gold(_plain(_json(value, name, (list, dict)), name))


def _responses(value, name):
    out = []
    for j, r in enumerate(_json(value, name, list)):
        if not isinstance(r, dict):
            raise BadField(f"{name}[{j}]", "expected an object")
        resp = r.get("response", "")
        out.append({"name": _str(r.get("name"), f"{name}[{j}].name"),
                    "arguments": _plain(_json(r.get("arguments", {}), f"{name}[{j}].arguments", dict),
                                        f"{name}[{j}].arguments"),
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


def _calls(content, name):
    """The calls of one tool_call message: a dict {"name", "arguments"} or a list of them, in
    JSON or as a Python literal (Toucan writes str(dict); parsed, never eval'd), its arguments
    a dict or a JSON string."""
    if len(content) > MAX_JSON_CHARS:  # also bounds the Python parser's time and memory below
        raise BadField(name, f"{len(content)} characters, over the limit of {MAX_JSON_CHARS}")
    try:
        value = loads(content)
    except ValueError:
        try:  # deep nesting is a SyntaxError or MemoryError of the parser; loads bounds the result
            value = loads(json.dumps(ast.literal_eval(content)))
        except Exception as e:  # noqa: BLE001 -- SyntaxError, ValueError, TypeError (a set), MemoryError, ...
            raise BadField(name, f"not JSON or a Python literal ({_why(e)[:200]})") from None
    out = []
    for c in value if isinstance(value, list) else [value]:
        if not isinstance(c, dict) or not isinstance(c.get("name"), str):
            raise BadField(name, "expected a call with a string 'name'")
        out.append({"name": c["name"], "arguments": _json(c.get("arguments") or {}, f"{name}.arguments", dict)})
    return out


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
        bonus=_str(extra.get("bonus_call") or "", "extra_info.bonus_call"),
        bonus_args=_plain(_json(extra.get("bonus_args") or {}, "extra_info.bonus_args", dict), "extra_info.bonus_args"),
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
            calls = _calls(m["content"], f"messages[{j}].content")
            if prev != "tool_call":  # a new run of consecutive calls is a new step
                gold.append([])
            gold[-1] += calls
            pending += calls
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


def _chat(row):
    if "conversations" in row:
        chat = []
        for j, t in enumerate(_json(row["conversations"], "conversations", list)):
            if not isinstance(t, dict) or t.get("from") not in SFT_ROLES:
                raise BadField(f"conversations[{j}].from", f"expected one of {sorted(SFT_ROLES)}")
            chat.append({"role": SFT_ROLES[t["from"]], "content": _str(t.get("value"), f"conversations[{j}].value")})
        return _joined(chat)
    if "messages" not in row:
        raise BadField("<row>", "expected 'conversations' or 'messages'")
    messages = _messages(row["messages"], "messages",
                         {"system", "user", "assistant", "tool", "tool_call", "tool_response"})
    chat = []
    for is_call, run in groupby(enumerate(messages), key=lambda jm: jm[1]["role"] == "tool_call"):
        if is_call:  # one assistant turn, one block, the list of the run's calls
            calls = [c for j, m in run for c in _calls(m["content"], f"messages[{j}].content")]
            block = "<tool_call>\n" + json.dumps(calls, ensure_ascii=False) + "\n</tool_call>"
            chat.append({"role": "assistant", "content": block})
        else:
            for _, m in run:
                if m["role"] == "tool_response":
                    m = {"role": "user", "content": f"<tool_response>\n{m['content']}\n</tool_response>"}
                chat.append(m)
    key = "tools" if row.get("tools") is not None else "available_tools"
    tools = _tools(row.get(key) or [], key)
    if tools and not any(m["role"] == "system" and "<tools>" in m["content"] for m in chat):
        from lib.inputs.chat import with_tools  # here, not at the top: tiny imports transformers (seconds)
        chat = with_tools(chat, tools)
    return _joined(chat)


def _alternates(row):
    """Whether the row's turns after the system message alternate user-side and assistant-side,
    user first and assistant last (LLaMA-Factory's check; a malformed row is left to _chat)."""
    turns = row.get("conversations") if "conversations" in row else row.get("messages")
    try:
        turns = _json(turns, "messages", list)
        roles = [t.get("from", t.get("role")) for t in turns]
    except (BadField, AttributeError):
        return True
    roles = roles[1:] if roles and roles[0] == "system" else roles
    side = [USER_SIDE, ASSISTANT_SIDE]
    return len(roles) % 2 == 0 and all(r in side[k % 2] for k, r in enumerate(roles))


def _joined(chat):
    """Consecutive user turns, and consecutive assistant turns, joined with "\\n"."""
    out = []
    for m in chat:
        if out and m["role"] == out[-1]["role"] and m["role"] in ("user", "assistant"):
            out[-1] = {"role": m["role"], "content": out[-1]["content"] + "\n" + m["content"]}
        else:
            out.append(m)
    return out


def _summary(path, sft):
    if sft:
        chats = load_sft(path)
        return f"{path}: {len(chats)} SFT chats, {sum(len(c) for c in chats)} messages"
    kinds = {}
    for t in load_tasks(path):
        kinds[t.parallel_type] = kinds.get(t.parallel_type, 0) + 1
    return f"{path}: {sum(kinds.values())} tasks, {kinds}"


def normalize_gold(gold):
    """Gold calls in any released form -> nested steps [[{"name": str, "arguments": dict}, ...], ...].

    The release's rules (see the module docstring): a JSON string is parsed (unparsable: no
    gold); a list whose first item is a list is nested (non-list steps skipped, items that
    are neither strings nor non-empty dicts dropped), any other list is one flat step (items
    that are neither strings nor dicts dropped); empty steps are dropped; anything else is no
    gold. The output is normalized again to itself.
    """
    if isinstance(gold, str):
        try:
            gold = loads(gold)
        except ValueError:
            return []
    if not isinstance(gold, list) or not gold:
        return []
    if isinstance(gold[0], list):
        steps = [[c for c in s if isinstance(c, str) or (isinstance(c, dict) and c)]
                 for s in gold if isinstance(s, list)]
    else:
        steps = [[c for c in gold if isinstance(c, (str, dict))]]
    return [[_gold_call(c) for c in s] for s in steps if s]


def _gold_call(c):
    if isinstance(c, str):
        return {"name": c, "arguments": {}}
    name, args = c.get("name", ""), c.get("arguments")
    if isinstance(args, str):
        try:
            args = loads(args)
        except ValueError:
            args = {}
    # a name that is not a string can equal no predicted name, and neither can ""
    return {"name": name if isinstance(name, str) else "", "arguments": args if isinstance(args, dict) else {}}


if __name__ == "__main__":
    try:
        paths = list(release_files().values()) if sys.argv[1:] == ["release"] else sys.argv[1:]
        for p in paths:
            print(_summary(p, "sft" in Path(p).name))  # a file named *sft* holds SFT chats
    except DataError as e:
        sys.exit(f"error: {e}")
