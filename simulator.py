"""SGLS: the schema-guided LLM simulator that answers the policy's tool calls (docs/method.md §5).

Tools are never executed. `Simulator.respond(texts, tasks)` takes assistant-turn texts and their
tasks and returns, per text, `(calls, observations)`: one observation per call, in call order.
It never raises, whatever the text or the task, and takes linear time in the text.

1. Parse the turn's calls (`parse_calls`: think blocks dropped, then segment.parse_block on each
   `<tool_call>` body; the first MAX_CALLS kept). `malformed="end"` (the release's Hermes parser)
   drops what does not parse; "answer" makes it an error call. `parse="release"` keeps think
   blocks and passes non-object arguments on, as the release's agent loop does.
2. Check each call, in order, with the released code's strings; a call that fails gets
   `call.error` set to its observation:
   1. bad arguments     "Error: " + call.error
   2. unknown tool      `Tool '<name>' not found in the current available tools set.`
   3. missing required  `Tool '<name>' missing required parameters: ['a', 'b']`
   4. schema violation  `Tool '<name>' arguments do not match its schema: <message> at '<$.path>'`
                        (not in the released code: `schema_check="light"` stops at 3; bounded per call and
                        per turn, lib/frozen/schema.py: a turn's calls share one budget, so its check-4 work is
                        bounded whatever its number of calls; a call past it gets "could not be checked")
3. Answer the calls that pass: "replay" gives the recorded answer of `task.responses` (else
   NO_RESULT); "llm" asks the frozen LLM (lib/frozen/llm.py) in the release's framing, PROMPT (lib/frozen/sgls.py), and takes the
   body of its last `<tool_response>`; no answer is check 5, `Error when executing tool: <reason>`,
   with `call.failed` set. Observations are cut to `max_chars` in the middle (`truncate`); LLM
   answers are kept in `<cache_dir>/sgls_cache.jsonl` when `cache_dir` is given.

`ablate=True` is "w/o SGLS": the LLM without the tool definition, and no checks 2-4. `sim.stats`
counts calls, errors (checks 1-4), cached, asked, failed (check 5), no_reply and bad_cache_lines.
train.py and eval.py build one from their --sim-* flags.
Tests: python -m pytest tests/test_simulator.py -q
"""
import json
import os
import threading

from segment import CLOSE, OPEN, Call, find_blocks, parse_block, strip_think

from lib.frozen.schema import Schemas, Turn
from lib.frozen.sgls import PROMPT, append_cache, definition_text, json_text, load_cache, truncate, unwrap

NO_CALL = "Invalid tool call format - no complete call in <tool_call>...</tool_call>"  # shown as "Error: " + NO_CALL
NO_RESULT = json.dumps({"error": "no_result", "message": "No matching record."})  # replay miss
FAILED = "Error when executing tool: "  # check 5
ANSWER_TOKENS = 4096  # per simulated answer: the release's max_new_tokens (toucan_tool_config.yaml)
MAX_CALLS = 20     # calls answered per turn: the release's max_parallel_calls (train_slca_grpo.sh)
SCHEMA_CHECKS = ("full", "light")  # check 4 on, or stopping at check 3 (the released code's); the first is the default
MALFORMED = ("end", "answer")       # what a block that does not parse does (module doc); the first is the default
PARSES = ("project", "release")  # think blocks dropped and object arguments only, or neither (the release's agent loop)



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


class Simulator:
    """backend "replay" | "llm" (needs `client`), None: llm when a `client` is given, else replay;
    schema_check "full" | "light"; malformed "end" | "answer"; see the module doc."""

    def __init__(self, backend=None, client=None, *, schema_check=SCHEMA_CHECKS[0], ablate=False, max_chars=2048,
                 temperature=0.6, retries=3, cache_dir=None, max_tokens=ANSWER_TOKENS, malformed=MALFORMED[0],
                 max_calls=MAX_CALLS, parse=PARSES[0], prompt=PROMPT):
        backend = backend or ("llm" if client is not None else "replay")
        assert backend in ("replay", "llm") and schema_check in SCHEMA_CHECKS and malformed in MALFORMED
        assert parse in PARSES
        assert backend == "replay" or client is not None, "the llm backend needs a client (lib/frozen/llm.py)"
        self.backend, self.client, self.schema_check, self.ablate = backend, client, schema_check, ablate
        self.max_chars, self.temperature, self.retries, self.max_tokens = max_chars, temperature, retries, max_tokens
        self.malformed, self.max_calls, self.parse, self.prompt = malformed, max_calls, parse, prompt
        self.stats = dict.fromkeys(("calls", "errors", "cached", "asked", "failed", "no_reply", "bad_cache_lines"), 0)
        self.cache, self.cache_path, self._lock = {}, None, threading.Lock()
        self._schemas = Schemas()  # check 4
        if cache_dir:
            os.makedirs(cache_dir, exist_ok=True)
            self.cache_path = os.path.join(cache_dir, "sgls_cache.jsonl")
            self.cache, self.stats["bad_cache_lines"] = load_cache(self.cache_path)

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
            tools, turn = _definitions(task), Turn()
            obs = []
            for i, call in enumerate(calls):
                error = self._check(call, tools, turn)
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

    def _check(self, call, tools, turn):
        """Checks 1-4 (check 4 spends `turn`, its turn's budget): the error observation, or None when the call may
        be answered."""
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
            return self._schemas.error(call.name, schema, call.arguments, turn)
        return None

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
                answers[j] = json_text(replies[j]) or None
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
        shown = "" if self.ablate else definition_text(definition)
        request = json.dumps([{"name": call.name, "parameters": call.arguments, "depend_on": []}],
                             ensure_ascii=False).replace("<", "\\u003c")
        return self.prompt.format(definition=shown, call=f"{OPEN}{request}{CLOSE}")

    def _count(self, **counts):
        with self._lock:
            for k, n in counts.items():
                self.stats[k] += n

    def _store(self, key, answer):
        with self._lock:
            self.cache[key] = answer
            append_cache(self.cache_path, key, answer)


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
