"""SGLS: the schema-guided LLM simulator that answers the policy's tool calls (SPEC §5).

Tools are never executed. `Simulator.respond(texts, tasks)` takes assistant-turn texts
(think blocks dropped first, as in rewards.py) and their tasks, parses every `<tool_call>`
block (segment.parse_block; arguments given as a JSON string are accepted), and returns, per
text, the calls and one observation per call, in call order. Each call is checked, in order,
with the released code's strings:

1. malformed call    "Error: " + call.error, e.g. `Error: Invalid tool arguments format - <reason>`
2. unknown tool      `Tool '<name>' not found in the current available tools set.`
3. missing required  `Tool '<name>' missing required parameters: ['a', 'b']`   (str of a list)
4. schema violation  `Tool '<name>' arguments do not match its schema: <message> at '<$.path>'`
                     (jsonschema's best_match error, its JSON path). Not in the released code:
                     `schema_check="light"` stops at 3; a tool schema that is itself invalid
                     falls back to light, with a warning.
5. backend failure   `Error when executing tool: <reason>`

A turn that opens `<tool_call>` but yields no call (an unterminated block, an empty list)
gets one malformed Call, observed as "Error: " + NO_CALL. A turn without `<tool_call>` gets
([], []): the trajectory is done. The tools of a task are `task.tools` (OpenAI list),
restricted to `task.allowed_tools` when that is non-empty.

Backends for the calls that pass the checks:
- "replay" (offline default): the recorded answer of `task.responses` with the same name and
  canonical arguments, else NO_RESULT.
- "llm": the frozen LLM (`client`, see llm.py) plays the API server and must answer
  `<tool_response>{json}</tool_response>`; it sees the tool definition and the call.
  All valid calls of the batch go out in one `client.complete` (which threads them). The last
  complete `<tool_response>` body is the answer; a reply without one is asked again
  (`retries` times); if the last reply is still without one but is itself a JSON object or
  list, that text is the answer, else error 5.

`ablate=True` is "w/o SGLS": the LLM without the tool definition, and no checks 2-4.
Observations longer than `max_chars` are cut in the middle (`truncate`). With `cache_dir`,
LLM answers are kept in `<cache_dir>/sgls_cache.jsonl`, keyed by (backend, tool name,
canonical arguments), loaded at start, first answer wins: repeated evaluation is
deterministic and cheap. The key ignores the tool's description and the sim model, so use
one directory per tool set and model.

train.py and eval.py build one from their --sim-* flags. Tests: python -m pytest tests/test_simulator.py -q
"""
import json
import os
import threading
import warnings

import jsonschema

from segment import OPEN, Call, find_blocks, parse_block, strip_think

NO_CALL = "Invalid tool call format - no complete call in <tool_call>...</tool_call>"  # shown as "Error: " + NO_CALL
NO_RESULT = json.dumps({"error": "no_result", "message": "No matching record."})  # replay miss
RESP_OPEN, RESP_CLOSE = "<tool_response>", "</tool_response>"
MAX_TOKENS = 1024  # per simulated answer; observations are cut to 2,048 characters anyway (SPEC §6)

PROMPT = """You are a backend API server, not an assistant. A client has sent you a function call;
execute it and reply with the result the real API would return, as JSON.

Reply with exactly one block of this form and nothing else:
<tool_response>{{"key": "value"}}</tool_response>

Never write prose, explanations, markdown or code fences, and never write <tool_call>: you
answer calls, you do not make them. Make the result realistic and consistent with the call;
if the call cannot succeed, return the JSON error the API would return.

Examples:
call {{"name": "calculator", "arguments": {{"expression": "124 * 5"}}}}
<tool_response>{{"result": 620}}</tool_response>
call {{"name": "get_weather", "arguments": {{"city": "Seattle"}}}}
<tool_response>{{"temperature_c": 12, "condition": "rain"}}</tool_response>
{definition}
Incoming call:
{call}"""
DEFINITION = "\nTool definition:\n{}\n"


def canonical(name, arguments):
    """The key that matches a call with a recorded response or a cached answer."""
    return name + json.dumps(arguments, sort_keys=True, separators=(",", ":"))


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


def _json_text(text):
    """`text` stripped if it is a JSON object or list, else ""."""
    text = text.strip()
    try:
        return text if isinstance(json.loads(text), (dict, list)) else ""
    except ValueError:
        return ""


class Simulator:
    """backend "replay" | "llm" (needs `client`); schema_check "full" | "light"; see the module doc."""

    def __init__(self, backend="replay", client=None, schema_check="full", ablate=False, max_chars=2048,
                 temperature=0.6, retries=3, cache_dir=None, max_tokens=MAX_TOKENS):
        assert backend in ("replay", "llm") and schema_check in ("full", "light")
        assert backend == "replay" or client is not None, "the llm backend needs a client (llm.py)"
        self.backend, self.client, self.schema_check, self.ablate = backend, client, schema_check, ablate
        self.max_chars, self.temperature, self.retries, self.max_tokens = max_chars, temperature, retries, max_tokens
        self.cache, self.cache_path, self._lock = {}, None, threading.Lock()
        if cache_dir:
            os.makedirs(cache_dir, exist_ok=True)
            self.cache_path = os.path.join(cache_dir, "sgls_cache.jsonl")
            if os.path.exists(self.cache_path):
                with open(self.cache_path, encoding="utf-8") as f:
                    for line in f:
                        if line.strip():
                            row = json.loads(line)
                            self.cache.setdefault(row["key"], row["response"])

    def respond(self, texts, tasks):
        """Per text: (calls, observations), one observation per call, in call order."""
        out, pending = [], []  # pending: (turn index, call index, tool definition, call)
        for t, (text, task) in enumerate(zip(texts, tasks)):
            text = strip_think(text)
            calls = [c for body in find_blocks(text) for c in parse_block(body, string_args=True)]
            if OPEN in text and not calls:
                calls = [Call(error=NO_CALL)]
            tools = _tools(task)
            obs = []
            for i, call in enumerate(calls):
                error = self._check(call, tools)
                obs.append(error)
                if error is None:
                    if self.backend == "replay":
                        obs[i] = _replay(call, task)
                    else:
                        pending.append((t, i, tools.get(call.name), call))
            out.append((calls, obs))
        for (t, i, _, _), answer in zip(pending, self._ask([(d, c) for _, _, d, c in pending])):
            out[t][1][i] = answer
        return [(calls, [truncate(o, self.max_chars) for o in obs]) for calls, obs in out]

    def _check(self, call, tools):
        """Checks 1-4: the error observation, or None when the call may be answered."""
        if call.error:
            return "Error: " + call.error
        if self.ablate:
            return None
        if call.name not in tools:
            return f"Tool '{call.name}' not found in the current available tools set."
        schema = tools[call.name].get("parameters")
        if not isinstance(schema, dict):
            return None
        required = schema.get("required")
        missing = [p for p in required if isinstance(p, str) and p not in call.arguments] \
            if isinstance(required, list) else []
        if missing:
            return f"Tool '{call.name}' missing required parameters: {missing}"
        if self.schema_check == "full":
            return _schema_error(call, schema)
        return None

    def _ask(self, jobs):
        """Answer (tool definition, call) jobs with the LLM, cache first; one observation each."""
        backend = "llm-ablate" if self.ablate else "llm"
        keys = [json.dumps([backend, canonical(c.name, c.arguments)]) for _, c in jobs]
        answers = [self.cache.get(k) for k in keys]
        prompts = [[{"role": "user", "content": PROMPT.format(
            definition="" if self.ablate else DEFINITION.format(json.dumps(d, indent=2, ensure_ascii=False)),
            call=json.dumps({"name": c.name, "arguments": c.arguments}, ensure_ascii=False))}] for d, c in jobs]
        replies = [""] * len(jobs)
        todo = [j for j, a in enumerate(answers) if a is None]
        for _ in range(1 + self.retries):
            if not todo:
                break
            for j, reply in zip(todo, self.client.complete([prompts[j] for j in todo], self.temperature,
                                                           self.max_tokens)):
                replies[j] = reply
                answers[j] = unwrap(reply or "") or None
            todo = [j for j in todo if answers[j] is None]
        for j in range(len(jobs)):
            if answers[j] is None:
                answers[j] = _json_text(replies[j] or "") or None
            if self.cache_path and answers[j] is not None and keys[j] not in self.cache:
                self._store(keys[j], answers[j])
        return [a if a is not None else "Error when executing tool: " + (
            "no reply from the simulator LLM" if replies[j] is None
            else "the simulator LLM gave no <tool_response>") for j, a in enumerate(answers)]

    def _store(self, key, answer):
        with self._lock, open(self.cache_path, "a", encoding="utf-8") as f:  # one write per line
            self.cache[key] = answer
            f.write(json.dumps({"key": key, "response": answer}, ensure_ascii=False) + "\n")


def _tools(task):
    """name -> function definition ({name, description, parameters}) of the task's available tools."""
    defs = [t.get("function", t) for t in task.tools]
    allowed = set(task.allowed_tools or [])
    return {d["name"]: d for d in defs if not allowed or d["name"] in allowed}


def _replay(call, task):
    key = canonical(call.name, call.arguments)
    for r in task.responses:
        if canonical(r["name"], r["arguments"]) == key:
            return r["response"]
    return NO_RESULT


def _schema_error(call, schema):
    """Check 4: the jsonschema violation as a message, or None; an invalid schema warns and passes."""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
        error = jsonschema.exceptions.best_match(cls(schema).iter_errors(call.arguments))
    except Exception as e:  # a broken tool schema (bad keyword, unresolvable $ref, …) must not crash a rollout
        warnings.warn(f"tool '{call.name}' has an invalid JSON schema, checked light only: {type(e).__name__}: "
                      f"{str(e).splitlines()[0]}")
        return None
    if error is None:
        return None
    return f"Tool '{call.name}' arguments do not match its schema: {error.message} at '{error.json_path}'"
