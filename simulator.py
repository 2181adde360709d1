"""SGLS: the schema-guided LLM simulator that answers the policy's tool calls (docs/method.md §5).

Tools are never executed. `Simulator.respond(texts, tasks)` takes assistant-turn texts and
their tasks and returns, per text, `(calls, observations)`: one observation per call, in
call order. It never raises, whatever the text or the task, and takes linear time in the
text (< 1 s on 1 MB).

Parsing (`parse_calls`). Think blocks are dropped first (segment.strip_think, as in
rewards.py), then every complete `<tool_call>...</tool_call>` body is read (segment.py's
linear helpers; JSON through lib.text.loads, bounded), and each body goes to the one call
parser, segment.parse_block; `malformed` picks its mode:
- "end" (default; `drop_malformed=True`): the release's Hermes parser (verl tool_parser.py).
  A body is a JSON object (one call) or a list (a parallel step); a body that is not JSON (or a block never
  closed) yields no call, and so does an item that is not an object or whose "name" is not
  a string (an empty name is kept; check 2 rejects it). The arguments are "arguments", or
  "parameters" when "arguments" is missing or empty, else {}; a JSON string is decoded. A
  turn with no call at all gets ([], []) and rollout.py ends the trajectory there.
- "answer" (the project's earlier behaviour): parse_block's default mode, where each malformed
  block or item is a Call with an error, shown as "Error: " + error, and a turn that opens
  `<tool_call>` but yields no call gets one Call(error=NO_CALL); the trajectory goes on.
Only the first `max_calls` (20, the release's max_parallel_calls) calls of a turn are kept.
`parse="release"` reads calls as the release's agent loop does: think blocks are not dropped
(a call inside one is answered), and JSON arguments that are not an object (a list, a number,
a string) are no check-1 error: check 3 skips them (toucan_vllm_tool.py checks required
parameters of a dict only) and they go to the backend as they are.

Checks, in order, with the released code's strings; a call that fails one gets
`call.error` set to its observation:
1. bad arguments     "Error: " + call.error, e.g. `Error: Invalid tool arguments format - <reason>`
                     (arguments that are JSON but not an object are an error here; the
                     release passes them on to the LLM: `parse="release"`)
2. unknown tool      `Tool '<name>' not found in the current available tools set.`
3. missing required  `Tool '<name>' missing required parameters: ['a', 'b']`   (str of a list)
4. schema violation  `Tool '<name>' arguments do not match its schema: <message> at '<$.path>'`
                     (jsonschema's best_match error, its JSON path), or when the check cannot run:
                     `Tool '<name>' arguments could not be checked against its schema: <why>` (more
                     than MAX_VALUES values, an integer of more than MAX_DIGITS digits, or "the check
                     ran over its budget"). Not in the released code: `schema_check="light"` stops at 3.
5. backend failure   `Error when executing tool: <reason>`; the call gets `failed=True` (no answer
                     came, or none held a result): the observation is not a real tool response.

Tool schemas are untrusted data, and so are the arguments checked against them: check 4 is
bounded. Each schema is checked against its metaschema the first time it is met (within
META_STEPS keyword evaluations and META_SECONDS); `$ref`s resolve inside the schema or to a
metaschema jsonschema ships (a `referencing` registry that refuses to retrieve: no http
fetch, no file read). A call's check may take MAX_STEPS keyword evaluations (deterministic)
and SCHEMA_SECONDS (a backstop); over either, the call gets the "could not be checked" error.
Every keyword is metered, and the draft is pinned to the root's (at a nested "$schema"
jsonschema would switch to its own, unmetered validator). `pattern`, `patternProperties` and
`additionalProperties` match with the `regex` module within PATTERN_SECONDS per call (a
match still running then counts as a pass: no catastrophic backtracking); `uniqueItems` is
linear (jsonschema's compares every pair of items that do not sort). A schema that is
invalid, fails or runs out of budget in its metaschema check, or has unevaluatedProperties
with patternProperties (jsonschema matches those with `re`, unbounded) warns once and is
checked light from then on. A call jsonschema raises on (an unresolvable `$ref`, a `$ref`
loop, ...) is checked light, that call only (warned once per schema): no failure turns
check 4 off for later calls.
The tools of a task are `task.tools` (OpenAI list), restricted to `task.allowed_tools` when
that is a non-empty list; malformed entries are skipped.

Backends for the calls that pass the checks:
- "replay" (offline default): the recorded answer of `task.responses` with the same name and
  canonical arguments, else NO_RESULT.
- "llm": the frozen LLM (`client`, see lib/llm.py) plays the API server (sampled at 0.6, at most
  4,096 tokens: the release's). As in the release it gets the call as
  `<tool_call>[{"name", "parameters", "depend_on": []}]</tool_call>` after the tool's full
  OpenAI-wrapped definition; every `<` of the call JSON is written `\\u003c` (the same JSON),
  so the policy's arguments cannot close the block or spell a special token. All valid
  calls of the batch go out in one `client.complete` (which threads them). The answer is
  untrusted: the body of its last complete `<tool_response>` (found in linear time); a
  reply without one is asked again (`retries` times); if the last reply is still without one
  but is itself a JSON object or list, that text is the answer, else error 5. No answer at
  all (the client's None, after its own retries) is error 5 at once, not asked again.

`ablate=True` is "w/o SGLS": the LLM without the tool definition, and no checks 2-4.
Observations longer than `max_chars` (2,048) are cut in the middle (`truncate`). With
`cache_dir`, LLM answers are kept in `<cache_dir>/sgls_cache.jsonl`, keyed by (backend, tool
name, canonical arguments), loaded at start (torn or invalid lines are skipped, counted and
warned about), first answer wins: repeated evaluation is deterministic and cheap. The key
ignores the tool's description and the sim model, so use one directory per tool set and model.

`sim.stats` counts, over the simulator's life: "calls" parsed, "errors" (failed checks 1-4),
"cached" (answers from the cache), "asked" (calls sent to the LLM), "failed" (error 5),
"no_reply" (of those, the client gave no answer: a transport failure), "bad_cache_lines".

train.py and eval.py build one from their --sim-* flags. Tests: python -m pytest tests/test_simulator.py -q
"""
import functools
import json
import os
import threading
import time
import warnings

import attrs  # a dependency of jsonschema: its validators are attrs classes
import jsonschema
import referencing
import referencing.exceptions
import regex  # a dependency of transformers; unlike re, its search takes a timeout

from segment import CLOSE, OPEN, Call, find_blocks, parse_block, strip_think

from lib.text import loads

NO_CALL = "Invalid tool call format - no complete call in <tool_call>...</tool_call>"  # shown as "Error: " + NO_CALL
NO_RESULT = json.dumps({"error": "no_result", "message": "No matching record."})  # replay miss
FAILED = "Error when executing tool: "  # check 5
RESP_OPEN, RESP_CLOSE = "<tool_response>", "</tool_response>"
ANSWER_TOKENS = 4096  # per simulated answer: the release's max_new_tokens (toucan_tool_config.yaml)
MAX_CALLS = 20     # calls answered per turn: the release's max_parallel_calls (train_slca_grpo.sh)
SCHEMA_CHECKS = ("full", "light")  # check 4 on, or stopping at check 3 (the released code's); the first is the default
MALFORMED = ("end", "answer")       # what a block that does not parse does (module doc); the first is the default
PARSES = ("project", "release")  # think blocks dropped and object arguments only, or neither (the release's agent loop)
PATTERN_SECONDS = 0.2  # ours: time for all schema `pattern` matches of one call (catastrophic backtracking)
MAX_STEPS = 10_000     # ours: keyword evaluations in a call's schema check (shipped tools: < 100; 60 props: 1,500)
SCHEMA_SECONDS = 2.0   # ours: wall-time backstop of a call's check; the step budget (deterministic) ends it first
META_STEPS = 100_000   # ours: the same for a tool schema's metaschema check, once per schema (22 KB schema: 16,000)
META_SECONDS = 10.0    # ours: its wall-time backstop
MAX_VALUES = 5_000     # ours: JSON values in a call's arguments that check 4 validates (flat array: 1.5 steps each)
MAX_DIGITS = 300       # ours: digits of an integer argument; past ~308 it does not fit the float multipleOf divides
BIG = 10 ** MAX_DIGITS  # the smallest integer of more than MAX_DIGITS digits

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


def _refuse(uri):
    raise referencing.exceptions.NoSuchResource(ref=uri)


NO_REMOTE = referencing.Registry(retrieve=_refuse)  # $refs resolve inside the schema only
_budget = threading.local()  # the running schema check's .steps left, .stop (backstop) and .end (patterns)


class OverBudget(Exception):
    """A schema check ran out of steps or time (raised from inside jsonschema; check 4 catches it)."""


def _arm(steps, seconds):
    """Give this thread's next schema check its budget: `steps` keyword evaluations, `seconds` of wall time."""
    now = time.monotonic()
    _budget.steps, _budget.stop, _budget.end = steps, now + seconds, now + PATTERN_SECONDS


def _metered(keyword):
    """jsonschema keyword function `keyword`, spending one step of the running check's budget first."""
    def run(validator, value, instance, schema):
        _budget.steps -= 1
        if _budget.steps < 0 or time.monotonic() > _budget.stop:
            raise OverBudget("the check ran over its budget")
        yield from keyword(validator, value, instance, schema) or ()
    return run


def _search(pattern, text):
    """regex.search within the call's time budget: True or False, None when out of time."""
    left = getattr(_budget, "end", 0) - time.monotonic()
    try:
        return regex.search(pattern, text, timeout=left) is not None if left > 0 else None
    except TimeoutError:
        return None


def _pattern(validator, pattern, instance, schema):
    """jsonschema's `pattern` keyword, time-bounded (a match that runs out of time passes)."""
    if validator.is_type(instance, "string") and _search(pattern, instance) is False:
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator, patterns, instance, schema):
    """jsonschema's `patternProperties` keyword, time-bounded (out of time: the key does not match)."""
    if validator.is_type(instance, "object"):
        for pattern, subschema in patterns.items():
            for k, v in instance.items():
                if _search(pattern, k):
                    yield from validator.descend(v, subschema, path=k, schema_path=pattern)


def _additional_properties(validator, extra, instance, schema):
    """jsonschema's `additionalProperties` (its messages), the patternProperties matched time-bounded (out of
    time: the key matches, so it is not an additional one); extras in the instance's key order."""
    if not validator.is_type(instance, "object"):
        return
    known, patterns = schema.get("properties", {}), schema.get("patternProperties", {})
    extras = [k for k in instance if k not in known and all(_search(p, k) is False for p in patterns)]
    if validator.is_type(extra, "object"):
        for k in extras:
            yield from validator.descend(instance[k], extra, path=k)
    elif not extra and extras:
        names = ", ".join(repr(k) for k in sorted(extras))
        if "patternProperties" in schema:
            verb = "does" if len(extras) == 1 else "do"
            yield jsonschema.ValidationError(f"{names} {verb} not match any of the regexes: "
                                             + ", ".join(repr(p) for p in sorted(patterns)))
        else:
            verb = "was" if len(extras) == 1 else "were"
            yield jsonschema.ValidationError(f"Additional properties are not allowed ({names} {verb} unexpected)")


def _same(value):
    """A hashable key, equal for two JSON values exactly when jsonschema's `equal` holds (1 == 1.0,
    True != 1, key order ignored). Numbers and strings key as strings, whose hashes are salted: crafted
    integers cannot collide in a set."""
    if isinstance(value, bool) or value is None:
        return "c", repr(value)
    if isinstance(value, int):
        return "n", str(value)
    if isinstance(value, float):
        return "n", str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, str):
        return "s", value
    if isinstance(value, (list, tuple)):
        return "l", tuple(_same(v) for v in value)
    if isinstance(value, dict):
        return "d", tuple(sorted((k, _same(v)) for k, v in value.items()))
    return "o", repr(value)


def _unique_items(validator, unique, instance, schema):
    """jsonschema's `uniqueItems` in linear time (jsonschema compares every pair of unsortable items)."""
    if unique and validator.is_type(instance, "array"):
        seen = set()
        for item in instance:
            key = _same(item)
            if key in seen:
                yield jsonschema.ValidationError(f"{instance!r} has non-unique elements")
                return
            seen.add(key)


BOUNDED = {"pattern": _pattern, "patternProperties": _pattern_properties,
           "additionalProperties": _additional_properties, "uniqueItems": _unique_items}


@functools.cache
def _bounded(cls):
    """jsonschema validator class `cls` with every keyword metered, the BOUNDED ones replaced, and its dialect
    pinned: jsonschema's evolve switches to its own (unbounded) class at a subschema with a "$schema" of its
    own, or at a $ref into a metaschema (including the root's own $ref "#")."""
    keywords = {k: _metered(BOUNDED.get(k, f)) for k, f in cls.VALIDATORS.items()}
    bounded = jsonschema.validators.extend(cls, keywords)
    fields = [(f.name, f.alias) for f in attrs.fields(bounded) if f.init]

    def evolve(self, **changes):
        for name, alias in fields:
            changes.setdefault(alias, getattr(self, name))
        return bounded(**changes)

    bounded.evolve = evolve
    return bounded


def _validator(schema, text):
    """A bounded validator for tool schema `schema`, JSON `text` (its own draft; 2020-12 without "$schema").
    Raises when the schema fails its metaschema, that check runs over budget (jsonschema's check_schema,
    bounded), or it has unevaluatedProperties and patternProperties (strings in `text`: jsonschema matches
    those patterns with `re`, no time limit)."""
    if '"unevaluatedProperties"' in text and '"patternProperties"' in text:
        raise ValueError("unevaluatedProperties with patternProperties, whose matches have no time limit")
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    meta = jsonschema.validators.validator_for(cls.META_SCHEMA, default=cls)
    _arm(META_STEPS, META_SECONDS)
    error = next(_bounded(meta)(cls.META_SCHEMA, format_checker=meta.FORMAT_CHECKER).iter_errors(schema), None)
    if error is not None:
        raise jsonschema.exceptions.SchemaError.create_from(error)
    return _bounded(cls)(schema, registry=NO_REMOTE)


def _oversize(value):
    """Why check 4 does not validate arguments `value` (too many values, too long an integer), else ""."""
    stack, n = [value], 0
    while stack:
        v = stack.pop()
        n += 1
        if n > MAX_VALUES:
            return f"they hold more than {MAX_VALUES} values"
        if isinstance(v, dict):
            stack += v.values()
        elif isinstance(v, list):
            stack += v
        elif isinstance(v, int) and not isinstance(v, bool) and abs(v) >= BIG:
            return f"an integer has more than {MAX_DIGITS} digits"
    return ""


def parse_calls(text, malformed="end", limit=None, parse="project"):
    """The first `limit` (all if None) calls of one assistant turn; see the module doc. Never raises."""
    text = strip_think(text) if parse == "project" else text
    calls = []
    for body in find_blocks(text):
        if limit is not None and len(calls) >= limit:
            break
        # "end": the release's Hermes parser, what does not parse is dropped; "answer": errors become calls
        calls += parse_block(body, string_args=True, drop_malformed=malformed == "end", object_args=parse == "project")
    if malformed == "answer" and not calls and OPEN in text:
        calls.append(Call(error=NO_CALL))
    return calls[:limit]


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
        return text if isinstance(loads(text), (dict, list)) else ""
    except ValueError:
        return ""


class Simulator:
    """backend "replay" | "llm" (needs `client`); schema_check "full" | "light"; malformed
    "end" | "answer"; see the module doc."""

    def __init__(self, backend="replay", client=None, schema_check=SCHEMA_CHECKS[0], ablate=False, max_chars=2048,
                 temperature=0.6, retries=3, cache_dir=None, max_tokens=ANSWER_TOKENS, malformed=MALFORMED[0],
                 max_calls=MAX_CALLS, parse=PARSES[0], prompt=PROMPT):
        assert backend in ("replay", "llm") and schema_check in SCHEMA_CHECKS and malformed in MALFORMED
        assert parse in PARSES
        assert backend == "replay" or client is not None, "the llm backend needs a client (lib/llm.py)"
        self.backend, self.client, self.schema_check, self.ablate = backend, client, schema_check, ablate
        self.max_chars, self.temperature, self.retries, self.max_tokens = max_chars, temperature, retries, max_tokens
        self.malformed, self.max_calls, self.parse, self.prompt = malformed, max_calls, parse, prompt
        self.stats = dict.fromkeys(("calls", "errors", "cached", "asked", "failed", "no_reply", "bad_cache_lines"), 0)
        self.cache, self.cache_path, self._lock = {}, None, threading.Lock()
        self._validators = {}  # schema JSON -> validator, or None for an invalid schema (checked light)
        self._warned = set()  # schema JSONs warned about
        if cache_dir:
            os.makedirs(cache_dir, exist_ok=True)
            self.cache_path = os.path.join(cache_dir, "sgls_cache.jsonl")
            if os.path.exists(self.cache_path):
                self._load_cache()

    def can_answer(self, task):
        """Whether every gold call of `task` gets a tool response here (the llm backend answers any call;
        replay only the recorded ones): train.py's check that a reward can be earned."""
        if self.backend == "llm":
            return True
        recorded = set()  # once per row: linear in its records, not records x gold calls
        for r in task.responses if isinstance(task.responses, list) else []:
            try:
                recorded.add(canonical(r["name"], r["arguments"]))
            except (KeyError, TypeError, ValueError, RecursionError):  # a record JSON cannot write: never matched
                continue
        return all(canonical(c["name"], c["arguments"]) in recorded for step in task.gold for c in step)

    def respond(self, texts, tasks):
        """Per text: (calls, observations), one observation per call, in call order."""
        out, pending = [], []  # pending: (turn index, call index, tool definition, call)
        for t, (text, task) in enumerate(zip(texts, tasks)):
            calls = parse_calls(text, self.malformed, self.max_calls, self.parse)
            tools = _definitions(task)
            obs = []
            for i, call in enumerate(calls):
                error = self._check(call, tools)
                obs.append(error)
                if error is not None:
                    call.error = call.error or error
                elif self.backend == "replay":
                    obs[i] = _replay(call, task)
                else:
                    pending.append((t, i, tools.get(call.name), call))
            out.append((calls, obs))
        answers = self._ask([(d, c) for _, _, d, c in pending])
        for (t, i, _, call), (answer, failed) in zip(pending, answers):
            out[t][1][i], call.failed = answer, failed
        self._count(calls=sum(len(c) for c, _ in out), errors=sum(bool(x.error) for c, _ in out for x in c),
                    failed=sum(f for _, f in answers))
        return [(calls, [truncate(o, self.max_chars) for o in obs]) for calls, obs in out]

    def _check(self, call, tools):
        """Checks 1-4: the error observation, or None when the call may be answered."""
        if call.error:
            return "Error: " + call.error
        if self.ablate:
            return None
        if call.name not in tools:
            return f"Tool '{call.name}' not found in the current available tools set."
        schema = tools[call.name]["function"].get("parameters")
        if not isinstance(schema, dict):
            return None
        required = schema.get("required")
        missing = [p for p in required if isinstance(p, str) and p not in call.arguments] \
            if isinstance(required, list) and isinstance(call.arguments, dict) else []
        if missing:
            return f"Tool '{call.name}' missing required parameters: {missing}"
        if self.schema_check == "full":
            return self._schema_error(call, schema)
        return None

    def _schema_error(self, call, schema):
        """Check 4: the jsonschema violation (or why the call could not be checked) as a message, or None:
        also for an invalid schema, and for a call jsonschema itself fails on (that call only)."""
        try:
            key = json.dumps(schema, sort_keys=True)
        except (TypeError, ValueError, RecursionError) as e:
            return self._invalid(call.name, str(id(schema)), e)
        if key not in self._validators:
            try:
                self._validators[key] = _validator(schema, key)
            except Exception as e:  # any way a schema can be broken: it must not crash a rollout
                return self._invalid(call.name, key, e)
        validator = self._validators[key]
        if validator is None:
            return None
        unchecked = f"Tool '{call.name}' arguments could not be checked against its schema: "
        oversize = _oversize(call.arguments)
        if oversize:
            return unchecked + oversize
        _arm(MAX_STEPS, SCHEMA_SECONDS)
        try:
            error = jsonschema.exceptions.best_match(validator.iter_errors(call.arguments))
        except OverBudget as e:
            return unchecked + str(e)
        except Exception as e:  # an unresolvable $ref, a $ref loop, ...: this call goes unchecked, later ones not
            self._warn(key, f"tool '{call.name}' has an invalid JSON schema or arguments jsonschema cannot check; "
                            f"such calls are checked light only", e)
            return None
        if error is None:
            return None
        return f"Tool '{call.name}' arguments do not match its schema: {error.message} at '{error.json_path}'"

    def _invalid(self, name, key, e):
        """Mark a schema invalid (checked light from now on), warning the first time; returns None."""
        with self._lock:
            self._validators[key] = None
        self._warn(key, f"tool '{name}' has an invalid JSON schema, checked light only", e)
        return None

    def _warn(self, key, text, e):
        """Warn about schema `key` once: `text` and the exception."""
        with self._lock:
            first = key not in self._warned
            self._warned.add(key)
        if first:
            warnings.warn(f"{text}: {type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}")

    def _ask(self, jobs):
        """Answer (tool definition, call) jobs with the LLM, cache first: one (observation, failed) each."""
        backend = "llm-ablate" if self.ablate else "llm"
        keys = [json.dumps([backend, canonical(c.name, c.arguments)]) for _, c in jobs]
        answers = [self.cache.get(k) for k in keys]
        replies = [""] * len(jobs)  # the last reply of each job; None: the client gave no answer
        todo = [j for j, a in enumerate(answers) if a is None]
        self._count(cached=len(jobs) - len(todo), asked=len(todo))
        prompts = {j: [{"role": "user", "content": self._prompt(*jobs[j])}] for j in todo}
        for _ in range(1 + self.retries):
            if not todo:
                break
            for j, reply in zip(todo, self.client.complete([prompts[j] for j in todo], self.temperature,
                                                           self.max_tokens)):
                replies[j] = reply if isinstance(reply, str) else None
                answers[j] = (unwrap(reply) or None) if replies[j] is not None else None
            todo = [j for j in todo if answers[j] is None and replies[j] is not None]  # no answer is final
        out = []
        for j, key in enumerate(keys):
            if answers[j] is None and replies[j] is not None:
                answers[j] = _json_text(replies[j]) or None
            if answers[j] is not None:
                answers[j] = truncate(answers[j], self.max_chars)
                if self.cache_path and key not in self.cache:
                    self._store(key, answers[j])
                out.append((answers[j], False))
            else:
                out.append((FAILED + ("no reply from the simulator LLM" if replies[j] is None
                                      else "the simulator LLM gave no <tool_response>"), True))
        self._count(no_reply=sum(r is None for r in replies))
        return out

    def _prompt(self, definition, call):
        """The simulator LLM's prompt for one call, in the release's framing."""
        shown = ""
        if not self.ablate and definition is not None:
            try:
                shown = DEFINITION.format(json.dumps(definition, indent=2, ensure_ascii=False))
            except (TypeError, ValueError, RecursionError):  # a definition JSON cannot write: ask without it
                shown = ""
        request = json.dumps([{"name": call.name, "parameters": call.arguments, "depend_on": []}],
                             ensure_ascii=False).replace("<", "\\u003c")
        return self.prompt.format(definition=shown, call=f"{OPEN}{request}{CLOSE}")

    def _count(self, **counts):
        with self._lock:
            for k, n in counts.items():
                self.stats[k] += n

    def _load_cache(self):
        """Read the cache file; skip (and count) torn or invalid lines; end it with a newline."""
        bad, last = 0, "\n"
        with open(self.cache_path, encoding="utf-8", errors="replace") as f:
            for last in f:
                if not last.strip():
                    continue
                try:
                    row = loads(last)
                except ValueError:
                    row = None
                if isinstance(row, dict) and isinstance(row.get("key"), str) and isinstance(row.get("response"), str):
                    self.cache.setdefault(row["key"], row["response"])
                else:
                    bad += 1
        if not last.endswith("\n"):  # a torn last line: the next append must start a line of its own
            with open(self.cache_path, "a", encoding="utf-8") as f:
                f.write("\n")
        if bad:
            warnings.warn(f"{self.cache_path}: skipped {bad} torn or invalid lines")
        self.stats["bad_cache_lines"] = bad

    def _store(self, key, answer):
        with self._lock, open(self.cache_path, "a", encoding="utf-8") as f:  # one write per line
            self.cache[key] = answer
            f.write(json.dumps({"key": key, "response": answer}) + "\n")


def _definitions(task):
    """name -> OpenAI-wrapped definition {"type": "function", "function": {...}} of the task's
    available tools; entries without a string name are skipped."""
    tools, allowed = getattr(task, "tools", None), getattr(task, "allowed_tools", None)
    allowed = {a for a in allowed if isinstance(a, str)} if isinstance(allowed, list) and allowed else None
    out = {}
    for t in tools if isinstance(tools, list) else []:
        fn = t.get("function", t) if isinstance(t, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str) and (allowed is None or fn["name"] in allowed):
            out[fn["name"]] = t if fn is not t else {"type": "function", "function": fn}
    return out


def unrecorded(turns, task):
    """How many answered calls of a rollout's `turns` got NO_RESULT from a row that records no tool
    response at all (the release's rows): misses the data causes, not the policy's wrong tools or
    arguments in a world that records its answers (train.py's replay_miss)."""
    responses = getattr(task, "responses", None)
    if isinstance(responses, list) and responses:
        return 0
    return sum(o == NO_RESULT for t in turns for c, o in zip(t["calls"], t["observations"])
               if not c["error"] and not c["failed"])


def _replay(call, task):
    key = canonical(call.name, call.arguments)
    responses = getattr(task, "responses", None)
    for r in responses if isinstance(responses, list) else []:
        if isinstance(r, dict) and isinstance(r.get("name"), str) and isinstance(r.get("arguments"), dict):
            try:
                if canonical(r["name"], r["arguments"]) == key:
                    response = r.get("response")
                    return response if isinstance(response, str) else json.dumps(response, ensure_ascii=False)
            except (TypeError, ValueError, RecursionError):  # a recorded row JSON cannot write
                continue
    return NO_RESULT
