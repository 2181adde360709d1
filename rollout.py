"""Batched multi-turn rollouts (docs/method.md §6): the turn loop, token-in/token-out.

Each task's prompt goes through the tokenizer's chat template once (tools added only when the
system message holds no <tools> block). Then, turn by turn, every live rollout samples one
assistant turn that stops at `</tool_call>`, eos or pad. A turn that holds a `<tool_call>` is
answered by the simulator; the end of the assistant turn, the tool turn with every observation
and the next assistant header are appended BY ID with response mask 0 (the policy's own ids
get mask 1). Earlier turns are never decoded and re-encoded, so the ids the policy is trained
on are the ids it sampled, each with its log-prob at temperature 1 (`Rollout.logprobs`, PPO's
old log-probs). Temperature 1 samples the raw logits' softmax; 0 is greedy.

Samplers (`--sampler`): "generate", `generate` below, the reference (Hugging Face
`model.generate` over each row's whole conversation, once per turn); "cached", lib.sampling.sampler
(the default: each row keeps its KV cache across turns); "compiled", lib.sampling.sampler through
torch.compile (lib/sampling/compiled.py). Greedy, they agree (tests/test_rollout.py).

The caps and the sampler are an `Episode`, train.py's flags of the same names: `max_turns` (10),
`max_tool_rounds` (the release's 6; 0 = no cap), `max_tokens` response tokens, observations
included (8,192), `gen_batch` rows at a time. Each rollout records why it
stopped: "done", "no_call", "turns", "tool_rounds" or "length". A simulator that raises does
not end the batch (its call fails, observed as "Error when executing tool: <reason>").
Untrusted text stays text: special-token strings in tasks, tools and observations are encoded
as plain text (`chat_ids`, `plain_ids`). The rules in full: docs/method.md §6.

    rs = rollout(model, tok, tasks, simulator)   # one Rollout per task: repeat tasks G times for a group
    rs = rollout(model, tok, tasks, simulator, Episode(sampler="generate"))   # the same through model.generate
"""
import functools
import warnings
from dataclasses import asdict, dataclass, field

import torch
from transformers import LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

from segment import CLOSE, OPEN, Call, segment_masks, strip_think

from lib.inputs.chat import chat_ids, renders_tools, with_tools
from lib.inputs.data import MAX_PROMPT_TOKENS
from lib.sampling import compiled
from lib.sampling.generation import Chosen
from lib.sampling.sampler import sample

MAX_TURNS = 10       # docs/method.md §6: assistant turns per trajectory
MAX_TOKENS = 8192    # docs/method.md §6: response tokens per trajectory, observations included
MAX_TOOL_ROUNDS = 6  # answered tool rounds per trajectory in train.py and eval.py (the release's max_user_turns)
TEMPERATURE = 1.0   # training rollouts' sampling temperature (docs/method.md §6); evaluation is greedy
GEN_BATCH = 64      # rows sampled at once: memory, not numbers (greedy ids do not depend on it)
SAMPLERS = ("cached", "generate", "compiled")  # --sampler: lib.sampling.sampler.sample (the default), `generate` (the
                                               # reference), lib.sampling.sampler.sample with lib/sampling/compiled.py's step


@dataclass(frozen=True)
class Episode:
    """One episode's caps and sampler: train.py's flags of the same names (eval.py toucan's too, but for
    temperature, greedy there, and its --batch-size for gen_batch)."""
    temperature: float = field(default=TEMPERATURE, metadata={"help": "rollout sampling temperature",
                                                              "range": "[0, 100]", "hidden": True})
    max_tokens: int = field(default=MAX_TOKENS, metadata={
        "help": "response tokens per trajectory, observations included", "range": "[1, 1e7]"})
    gen_batch: int = field(default=GEN_BATCH, metadata={
        "range": "[1, 1e7]", "hidden": True,
        "help": "rollouts sampled together through all their turns; a multiple of G prefills each prompt once"})
    max_prompt_tokens: int = field(default=MAX_PROMPT_TOKENS, metadata={
        "help": "longer prompts are dropped (the release's)", "range": "[1, 1e7]", "hidden": True})
    max_turns: int = field(default=MAX_TURNS, metadata={"help": "assistant turns per trajectory (docs/method.md §6)",
                                                        "range": "[1, 1e7]"})
    max_tool_rounds: int = field(default=MAX_TOOL_ROUNDS, metadata={
        "help": "answered tool rounds per trajectory (the release's max_user_turns); 0 = no cap", "range": "[0, 1e7]"})
    sampler: str = field(default=SAMPLERS[0], metadata={
        "choices": SAMPLERS,
        "help": "cached = lib/sampling/sampler.py (KV caches kept across turns, each prompt prefilled once per group); "
                "generate = Hugging Face model.generate, the reference; compiled = cached with each decoding step "
                "through torch.compile (lib/sampling/compiled.py; Qwen2 and Llama) (rollout.py)"})


@dataclass
class Rollout:
    task: object
    group: int
    prompt: list                                   # prompt ids
    ids: list = field(default_factory=list)        # response ids: policy turns + masked tool turns
    mask: list = field(default_factory=list)       # response mask: 1 on the policy's own tokens
    logprobs: list = field(default_factory=list)   # per response id: log π(id) at T=1 when sampled, 0 on glue
    turns: list = field(default_factory=list)      # per assistant turn: {"text", "calls", "observations"}
    stop: str = ""                                 # "done" | "no_call" | "turns" | "tool_rounds" | "length"
    tool_mask: list = field(default_factory=list)     # segment masks over `ids` (segment.py)
    summary_mask: list = field(default_factory=list)

    @property
    def text(self):
        """The policy's own text over all turns (what HierR scores)."""
        return "".join(t["text"] for t in self.turns)

    @property
    def final(self):
        """The last turn's text when it holds no tool call, else "" (docs/method.md §2.2)."""
        last = self.turns[-1]["text"] if self.turns else ""
        return "" if OPEN in strip_think(last) else last

    @property
    def observations(self):
        """Every observation the policy saw, error messages included."""
        return [o for t in self.turns for o in t["observations"]]

    @property
    def responses(self):
        """The real tool responses: observations of calls that passed the checks and were answered
        (what the judge sees and what opens the summary gate)."""
        return [o for t in self.turns for c, o in zip(t["calls"], t["observations"])
                if not c["error"] and not c["failed"]]

    @property
    def failed(self):
        """How many observations the policy saw are transport failures, not tool answers."""
        return sum(c["failed"] for t in self.turns for c, _ in zip(t["calls"], t["observations"]))

    @property
    def tool_turns(self):
        return sum(OPEN in strip_think(t["text"]) for t in self.turns)


def prompt_ids(tok, task):
    """Chat-template the task's prompt; tools only if the system message lacks them, written
    into the system message (lib.inputs.chat.with_tools) when the template ignores them."""
    has_tools = any(m["role"] == "system" and "<tools>" in m["content"] for m in task.messages)
    if has_tools or not task.tools:
        return chat_ids(tok, task.messages)
    if renders_tools(tok):
        return chat_ids(tok, task.messages, task.tools)
    return chat_ids(tok, with_tools(task.messages, task.tools))


def tool_turn_ids(tok, observations, ended_on_eos):
    """Ids that close the assistant turn, carry the observations and open the next turn.

    The tool turn comes from the chat template itself (rendered after a probe user turn, which
    is cut off), so any Hermes-style template works. A template that ignores tools gets the
    observations as one user turn of <tool_response> blocks: what Qwen2.5's template writes for
    tool messages, and how the SFT data carries them.
    """
    if renders_tools(tok):
        turn = [{"role": "tool", "content": o} for o in observations]
    else:
        turn = [{"role": "user", "content": "\n".join(f"<tool_response>\n{o}\n</tool_response>" for o in observations)}]
    probe = [{"role": "user", "content": "?"}]
    head = chat_ids(tok, probe, add_generation_prompt=False)
    ids = chat_ids(tok, probe + turn)
    if ids[:len(head)] != head:
        raise ValueError("the chat template does not render a tool turn after a user turn as a suffix")
    close = "\n" if ended_on_eos else tok.eos_token + "\n"
    return tok.encode(close, add_special_tokens=False) + ids[len(head):]


def stop_ids(tok, stop_at_call=True):
    """Token ids that end a turn: eos, pad and, with `stop_at_call`, </tool_call> when it is a single
    token (Qwen2.5; else `stop_text`). bench/models.py's BFCL and τ² replies pass False: one reply
    may hold several blocks."""
    ids = {tok.eos_token_id, tok.pad_token_id}
    if stop_at_call:
        ids.add(tok.convert_tokens_to_ids(CLOSE))
    if tok.unk_token_id is not None:
        ids.discard(tok.unk_token_id)
    return sorted(i for i in ids if i is not None)


def stop_text(tok, stop_at_call=True):
    """For a tokenizer without a `</tool_call>` token (SmolLM2, Llama, Mistral): a test on a turn's
    sampled ids, True once the last id completes a `</tool_call>` in the decoded text, however the
    policy spelled it in ids. Only the last len(CLOSE) ids are decoded (every id of a match holds
    at least one of its characters), so the test costs the same at every step. None when
    `</tool_call>` is one token (stop_ids has it) or with stop_at_call False."""
    if not stop_at_call or tok.convert_tokens_to_ids(CLOSE) not in (None, tok.unk_token_id):
        return None
    return lambda ids: CLOSE in tok.decode(ids[-len(CLOSE):])


# ---------------------------------------------------------------------------------------------
# the reference sampler (its log-prob keeper: lib/sampling/generation.py)
class TurnEnd(StoppingCriteria):
    """`generate`'s end of a turn, row by row: a stop id, `ended(its new ids)` (stop_text, which
    reads the last len(CLOSE) ids only) or its budget. `n[b]`: row b's turn length once it ended."""

    def __init__(self, start, budgets, stops, ended):
        self.start, self.budgets, self.stops, self.ended = start, budgets, set(stops), ended
        self.n = [None] * len(budgets)

    def __call__(self, input_ids, scores, **kwargs):
        k = input_ids.shape[1] - self.start                                  # new ids so far
        for b, tail in enumerate(input_ids[:, -min(k, len(CLOSE)):].tolist()):  # (B, <= len(CLOSE))
            if self.n[b] is None and (tail[-1] in self.stops or k >= self.budgets[b]
                                      or (self.ended is not None and self.ended(tail))):
                self.n[b] = k
        return torch.tensor([n is not None for n in self.n], device=input_ids.device)  # (B,)


@torch.no_grad()
def generate(model, past, pending, budgets, temperature, *, stops, ended, pad_id):
    """One assistant turn for each row with Hugging Face `model.generate`: lib.sampling.sampler.sample's
    contract with the ids themselves for a cache. Row b has fed `past[b]` (ids; None: none) and
    feeds `pending[b]`; it samples until a stop id, `ended(its ids)` or `budgets[b]` ids. Returns
    per row (ids, logprobs, every id fed: past + pending + ids[:-1]); budget < 1 samples nothing.

    One left-padded `generate` over every row's whole conversation: each turn prefills it again,
    the G rows of a prompt prefill it G times, and a finished row decodes padding until the last
    row ends. The log-probs are the raw logits' at the sampled ids (`Chosen`: one step's logits
    kept at a time, never generate's `output_logits`, B x T x vocab float32 per turn: 39 GB for 64
    rows x 1,000 ids of Qwen2.5's 151,936 ids; docs/memory.md).
    """
    out = [([], [], kv) for kv in past]
    todo = [b for b in range(len(past)) if budgets[b] >= 1]
    if not todo:
        return out
    seqs = [(past[b] or []) + pending[b] for b in todo]
    L = max(map(len, seqs))
    ids = torch.tensor([[pad_id] * (L - len(q)) + q for q in seqs], device=model.device)       # (B, L)
    attn = torch.tensor([[0] * (L - len(q)) + [1] * len(q) for q in seqs], device=model.device)  # (B, L)
    end = TurnEnd(L, [budgets[b] for b in todo], stops, ended)
    sampling = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if temperature > 0 \
        else dict(do_sample=False)
    chosen = Chosen()
    seq = model.generate(input_ids=ids, attention_mask=attn, max_new_tokens=max(end.budgets), eos_token_id=stops,
                         pad_token_id=pad_id, stopping_criteria=StoppingCriteriaList([end]), repetition_penalty=1.0,
                         logits_processor=LogitsProcessorList([chosen]), return_dict_in_generate=False, **sampling)
    new = seq[:, L:]                                                        # (B, T) finished rows padded
    chosen.take(new[:, -1])
    lp = torch.stack(chosen.lps[:new.shape[1]], 1)                          # (B, T) log π(id) at T=1
    for j, (b, row, lps) in enumerate(zip(todo, new.tolist(), lp.tolist())):
        n = end.n[j] or len(row)
        out[b] = (row[:n], lps[:n], seqs[j] + row[:n - 1])
    return out


# ---------------------------------------------------------------------------------------------
# rollouts
def observe(simulator, texts, tasks):
    """`simulator.respond`; if it raises, the texts are answered one by one and a text that still
    raises gets one failed call (an answer that never came) instead of ending the whole batch."""
    if not texts:
        return []
    try:
        out = simulator.respond(texts, tasks)
        if len(out) != len(texts):
            raise ValueError(f"{len(out)} answers for {len(texts)} turns")
        return out
    except Exception:
        out = []
        for text, task in zip(texts, tasks):
            try:
                out += simulator.respond([text], [task])[:1]
            except Exception as e:
                reason = f"{type(e).__name__}: {e}"[:200]
                warnings.warn(f"the simulator raised on a turn, observed as a failed call: {reason}")
                out.append(([Call(failed=True)], ["Error when executing tool: " + reason]))
        return out


def rollout(model, tok, tasks, simulator, episode=Episode(), groups=None):
    """Run every task to the end under `episode`'s caps, `episode.gen_batch` rollouts at a time, each turn
    sampled by `episode.sampler` (one of SAMPLERS; "cached": each batch keeps its caches over all its turns
    and a multiple of the group size G prefills each prompt once); `groups`: each task's group (default:
    its own). Returns one Rollout per task, in order."""
    if episode.sampler not in SAMPLERS:
        raise ValueError(f"sampler {episode.sampler!r}: not one of {SAMPLERS}")
    groups = list(range(len(tasks))) if groups is None else groups
    rs = [Rollout(t, g, prompt_ids(tok, t)) for t, g in zip(tasks, groups)]
    for s in range(0, len(rs), episode.gen_batch):
        run(model, tok, rs[s:s + episode.gen_batch], simulator, episode)
    for r in rs:
        m = torch.tensor([r.mask])                                      # (1, T)
        tool, summ, _, _ = segment_masks(m)
        r.tool_mask, r.summary_mask = tool[0].tolist(), summ[0].tolist()
    return rs


def run(model, tok, rs, simulator, episode):
    """All turns of the rollouts `rs`, in place. `kvs[i]`: what row i's sampler keeps between its
    turns (a KV cache, or for `generate` the ids fed); `pending[i]`: the ids it feeds next."""
    max_turns, max_tokens, max_tool_rounds = episode.max_turns, episode.max_tokens, episode.max_tool_rounds
    stops, ended = stop_ids(tok), stop_text(tok)
    sample_turn = {"cached": sample, "compiled": functools.partial(sample, decode=compiled.compiled),
                   "generate": functools.partial(generate, pad_id=tok.pad_token_id)}[episode.sampler]
    kvs, pending = [None] * len(rs), [r.prompt for r in rs]
    live = list(range(len(rs)))
    for turn in range(max_turns):
        if not live:
            break
        past, kvs = [kvs[i] for i in live], [None] * len(rs)  # handed over to the sampler, which frees them
        new = sample_turn(model, past, [pending[i] for i in live], [max_tokens - len(rs[i].ids) for i in live],
                          episode.temperature, stops=stops, ended=ended)
        callers, texts = [], []
        for i, (ids, lps, kv) in zip(live, new):
            r = rs[i]
            r.ids += ids
            r.mask += [1] * len(ids)
            r.logprobs += lps
            kvs[i], pending[i] = kv, ids[-1:]
            text = tok.decode(ids, skip_special_tokens=True)
            r.turns.append({"text": text, "calls": [], "observations": []})
            rounds = sum(bool(t["observations"]) for t in r.turns)
            if OPEN not in strip_think(text):
                r.stop = "done" if ids and (ids[-1] in stops or (ended is not None and ended(ids))) else "length"
            elif len(r.ids) >= max_tokens:
                r.stop = "length"
            elif turn == max_turns - 1:  # the cap: this call is never answered
                r.stop = "turns"
            elif max_tool_rounds and rounds >= max_tool_rounds:
                r.stop = "tool_rounds"
            else:
                callers.append(i)
                texts.append(text)
        live = []
        for i, (calls, obs) in zip(callers, observe(simulator, texts, [rs[i].task for i in callers])):
            r = rs[i]
            r.turns[-1]["calls"] = [asdict(c) for c in calls]
            if not obs:  # no parseable call: the trajectory ends here
                r.stop = "no_call"
                continue
            glue = tool_turn_ids(tok, obs, r.ids[-1] == tok.eos_token_id)
            if len(r.ids) + len(glue) >= max_tokens:  # no room for the observation and a reply
                r.stop = "length"
            else:
                r.turns[-1]["observations"] = obs
                r.ids += glue
                r.mask += [0] * len(glue)
                r.logprobs += [0.0] * len(glue)
                pending[i] = pending[i] + glue
                live.append(i)
        kvs = [kv if i in live else None for i, kv in enumerate(kvs)]  # drop the caches of ended rows


def collate(rs, pad_id):
    """Right-padded training tensors over prompt + response, each (B, L): ids, attention, the
    response, tool and summary masks (0 on the prompt) and the sampling-time log-probs
    (`logprobs[:, t]` = log π(ids_t | ids_<t), 0 where the response mask is 0)."""
    L = max(len(r.prompt) + len(r.ids) for r in rs)

    def pad(x, fill=0):
        return x + [fill] * (L - len(x))

    def resp(r, m):
        return torch.tensor(pad([0] * len(r.prompt) + m))

    return {"input_ids": torch.tensor([pad(r.prompt + r.ids, pad_id) for r in rs]),        # (B, L)
            "attention_mask": torch.tensor([pad([1] * (len(r.prompt) + len(r.ids))) for r in rs]),
            "response_mask": torch.stack([resp(r, r.mask) for r in rs]),
            "tool_mask": torch.stack([resp(r, r.tool_mask) for r in rs]),
            "summary_mask": torch.stack([resp(r, r.summary_mask) for r in rs]),
            "logprobs": torch.tensor([pad([0.0] * len(r.prompt) + r.logprobs, 0.0) for r in rs])}
