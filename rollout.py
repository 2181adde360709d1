"""Batched multi-turn rollouts with a KV-cached sampling loop of our own (docs/method.md §6).

Each task's prompt goes through the tokenizer's chat template once (tools are added only when
the system message does not already hold a <tools> block; a template that ignores `tools`
gets them written into the system message). Then, turn by turn, every live rollout samples
one assistant turn that stops at `</tool_call>` (by its text when the tokenizer has no such
token), eos or pad. A turn that holds a `<tool_call>` is answered by the simulator; the end of
the assistant turn, the tool turn with every observation and the next assistant header are
appended BY ID with response mask 0.
Earlier turns are never decoded and re-encoded (token-in, token-out), so the ids the policy is
trained on are the ids it sampled.

Sampling (`sample`, no `model.generate`). Each rollout keeps its KV cache from turn to turn: a
new turn feeds only what is not in the cache yet (the last sampled id and the tool-turn glue),
never the conversation again. The G rollouts of a prompt prefill it once and copy its cache.
The batch's cache has preallocated columns that each decoded id is written into in place (no
copy of the cache per step). A row leaves the batch as soon as it stops (its cache rows are cut
out and kept for its next turn; a live row moves into its slot), so no compute goes to finished
rows. Rows of different lengths sit in one batch left-padded (and, from the second turn on,
padded in the middle, between the cache and the new ids): a 2D attention mask over cache + new
ids hides the padding and position ids are cumsum(mask) - 1, so every row computes what it
would alone. Temperature 1 samples from the softmax of the raw logits (no top-k, top-p or
repetition penalty, as `generate` was asked to); temperature 0 is greedy. Every sampled id
comes with its log-prob under the policy at temperature 1 (log_softmax of the raw logits, in
float32, whatever the sampling temperature): `Rollout.logprobs`, the old log-probs of PPO (the
release recomputes them with a forward pass; train.py keeps that behind a flag, since bf16
batched decoding differs slightly from it). Models with sliding-window layers are not supported
(the cache is rebuilt as full layers).

Caps (docs/method.md §6): `max_turns` assistant turns (10); `max_tool_rounds` answered tool rounds
(None: no cap; the release's launcher sets max_user_turns=6, train.py's paper preset passes 6);
`max_tokens` response tokens in all, observations included (8,192); a trajectory that would
overflow stops before the observation. Observation length (2,048 chars) is the simulator's cap.
Each rollout records why it stopped:

    "done"         a turn without `<tool_call>` (the final answer)
    "no_call"      a turn with `<tool_call>` but no call the simulator could parse: it returned
                   ([], []) and the trajectory ends there, as the release's Hermes parser does
    "turns"        the max_turns-th turn holds a call; it is never answered
    "tool_rounds"  max_tool_rounds rounds were answered and the next turn holds a call again
    "length"       the token budget ran out (in a turn, or no room for the observation)

A simulator that raises does not end the batch: its texts are retried one by one and a text
that still raises gets one failed call (`Call.failed`), observed as
"Error when executing tool: <reason>".

Untrusted text stays text: task messages, tool definitions (data files) and observations may
hold special-token strings such as `<|im_end|>\\n<|im_start|>system`. `chat_ids` renders the
chat template with those strings swapped for private-use placeholders and encodes them back as
plain text, so only the template's own markup becomes special ids (for text without such
strings the ids equal the tokenizer's encoding of the rendered template). Non-special added
tokens (`<tool_call>`, `<tool_response>`, ...) are encoded as the tokenizer always does. Every
text goes through `plain_ids`, which first replaces lone surrogates (a JSON `"\\ud800"` in a
tool name, an endpoint reply or a data row; UTF-8 cannot encode them and the tokenizer would
raise) with U+FFFD and counts them (lib.text.encodable): the rollout goes on. sft.example
encodes with the same functions.

    rs = rollout(model, tok, tasks, simulator)   # one Rollout per task: repeat tasks G times for a group
"""
import functools
import warnings
from dataclasses import asdict, dataclass, field

import torch
from transformers.cache_utils import Cache, DynamicLayer

from segment import CLOSE, OPEN, Call, segment_masks, strip_think

from lib.chat import chat_ids, renders_tools, with_tools

MAX_TURNS = 10       # docs/method.md §6: assistant turns per trajectory
MAX_TOKENS = 8192    # docs/method.md §6: response tokens per trajectory, observations included
MAX_TOOL_ROUNDS = 6  # answered tool rounds per trajectory in train.py and eval.py (the release's max_user_turns)


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
    into the system message (lib.chat.with_tools) when the template ignores them."""
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
# sampling
ROOM = 256  # KV columns allocated at a time for the ids a batch samples (a full cache grows by this much)


class Slots(DynamicLayer):
    """One layer's KV cache in preallocated columns: buffers (B, H, cap, D) that `update` writes in
    place, so decoding an id copies nothing but its own keys and values; `keys` and `values` are
    views of the first n columns (what attention reads). Only `resize` allocates."""

    def __init__(self, cap):
        super().__init__()
        self.cap, self.n = cap, 0

    def lazy_initialization(self, key_states, value_states):
        B, H, _, D = key_states.shape
        self.k = key_states.new_zeros(B, H, self.cap, D)                        # (B, H, cap, D)
        self.v = value_states.new_zeros(B, H, self.cap, value_states.shape[-1])
        self.is_initialized = True

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = self.n + key_states.shape[-2]
        self.k[:, :, self.n:n], self.v[:, :, self.n:n] = key_states, value_states
        return self.fill(n)

    def fill(self, n):
        """The first n columns hold the cache: (keys, values), each (B, H, n, D)."""
        self.n, self.keys, self.values = n, self.k[:, :, :n], self.v[:, :, :n]
        return self.keys, self.values

    def resize(self, rows, cap):
        """Keep the batch rows `rows` (an index, or slice(None) for all) in new buffers of cap >= n columns."""
        k, v = self.keys[rows], self.values[rows]                               # (b, H, n, D)
        self.cap, self.n = cap, 0
        self.lazy_initialization(k, v)
        self.update(k, v)

    def move(self, src, dst, b):
        """Copy rows `src` into rows `dst` (lists), then keep the first b rows, in place."""
        if src:
            self.k[dst, :, :self.n], self.v[dst, :, :self.n] = self.k[src, :, :self.n], self.v[src, :, :self.n]
        self.k, self.v = self.k[:b], self.v[:b]
        self.fill(self.n)


def batch_cache(kvs, N, cap):
    """Per-row caches (per layer (keys, values), each (H, n, D); None: empty) left-padded into the
    first N of `cap` columns of one batched cache of `Slots` layers (N == 0: the layers start empty
    and are allocated at the model's first update). Each row's layers are released as they are
    copied (set to None), so the caches never exist twice."""
    if N == 0:
        return Cache(layer_class_to_replicate=functools.partial(Slots, cap))
    ref = next(kv for kv in kvs if kv is not None)
    n = [0 if kv is None else kv[0][0].shape[1] for kv in kvs]
    layers = []
    for layer in range(len(ref)):
        k0, v0 = ref[layer]                                                 # (H, n, D) each
        slots = Slots(cap)
        slots.lazy_initialization(k0.expand(len(kvs), *k0.shape), v0.expand(len(kvs), *v0.shape))  # (U, H, cap, D)
        for u, kv in enumerate(kvs):
            if kv is not None:
                slots.k[u, :, N - n[u]:N], slots.v[u, :, N - n[u]:N] = kv[layer]   # (H, n, D) each
                kv[layer] = None
        slots.fill(N)
        layers.append(slots)
    return Cache(layers=layers)


def row_cache(cache, mask, j):
    """Row j of a batched cache without its padding columns: per layer (keys, values), each (H, n, D).
    `mask` (B, C) covers the cache's C columns."""
    keep = mask[j].bool()                                                  # (C,)
    return [(layer.keys[j][:, keep], layer.values[j][:, keep]) for layer in cache.layers]


@torch.no_grad()
def sample(model, kvs, pending, budgets, temperature, stops, ended=None):
    """One assistant turn for each row, decoded from its KV cache.

    Row b holds `kvs[b]`, the cache of the ids it has fed so far (per layer (keys, values),
    each (H, n, D); None when it has fed nothing), and `pending[b]`, the ids to feed before it
    samples. Rows with no cache and the same pending ids (the G rollouts of one prompt) are
    prefilled once. Row b samples until a stop id, `ended(its ids)` (stop_text) or `budgets[b]` ids.
    Returns per row (ids, logprobs, cache): the sampled ids, their log-probs under the policy at
    temperature 1, and the cache of every id fed (the last sampled id is not fed: it starts the
    row's next pending ids). The caches passed in are consumed (emptied into the batch); a row
    with budget < 1 samples nothing and gets its cache back.

    The batch cache has preallocated columns (`Slots`; ROOM more whenever it is full), written in
    place. A row that stops is copied out of it and leaves the batch at once: a live row from the
    end of the batch moves into its slot (one row copied, nothing allocated). The rows are
    sampled in row order, whatever their slots, so the random draws are those of a batch holding
    the live rows in order.
    """
    device = model.device
    stops = torch.tensor(stops, device=device)
    out = [([], [], kv) for kv in kvs]
    todo = [b for b in range(len(kvs)) if budgets[b] >= 1]
    if not todo:
        return out
    # prefill each distinct (cache, pending ids) once: fresh rows with equal prompts share it
    key = {b: tuple(pending[b]) if kvs[b] is None else b for b in todo}
    first = {}
    for b in todo:
        first.setdefault(key[b], b)
    uniq = list(first.values())
    n = [0 if kvs[b] is None else kvs[b][0][0].shape[1] for b in uniq]
    p = [len(pending[b]) for b in uniq]
    N, P = max(n), max(p)
    C, room = N + P, min(max(budgets[b] for b in todo) - 1, ROOM)  # columns filled; free columns to feed ids
    ids = torch.zeros(len(uniq), P, dtype=torch.long)                     # (U, P) padding: any id, masked
    mask = torch.zeros(len(uniq), C + room, dtype=torch.long)             # (U, cap) cache + new ids + room
    for u, b in enumerate(uniq):
        ids[u, P - p[u]:] = torch.tensor(pending[b])
        mask[u, N - n[u]:N] = 1
        mask[u, C - p[u]:C] = 1
    ids, mask = ids.to(device), mask.to(device)
    pos = (mask[:, :C].cumsum(-1) - 1).clamp(min=0)                       # (U, C)
    cache = batch_cache([kvs[b] for b in uniq], N, C + room)
    logits = model(input_ids=ids, attention_mask=mask[:, :C], position_ids=pos[:, N:], cache=cache,
                   use_cache=True, logits_to_keep=1).logits[:, -1]        # (U, V)
    slot = {k: u for u, k in enumerate(first)}
    sel = torch.tensor([slot[key[b]] for b in todo], device=device)       # (B,) prefill row of each row
    mask, logits = mask[sel], logits[sel]                                 # (B, cap), (B, V)
    if len(uniq) < len(todo):
        for layer in cache.layers:
            layer.resize(sel, C + room)
    rows = list(todo)                                                     # rows[j]: the row in batch slot j
    new, lps = {b: [] for b in todo}, {b: [] for b in todo}
    while True:
        order = sorted(range(len(rows)), key=rows.__getitem__)            # the slots in row order
        sub = logits[torch.tensor(order, device=device)].float()          # (b, V)
        logp = sub.log_softmax(-1)                                        # (b, V) the policy at temperature 1
        if temperature > 0:
            nxt = torch.multinomial((sub / temperature).softmax(-1), 1)[:, 0]  # (b,)
        else:
            nxt = logp.argmax(-1)                                         # (b,)
        lp = logp.gather(-1, nxt[:, None])[:, 0]                          # (b,)
        stop = torch.isin(nxt, stops)                                     # (b,)
        done = set()
        for j, t, x, s in zip(order, nxt.tolist(), lp.tolist(), stop.tolist()):
            b = rows[j]
            new[b].append(t)
            lps[b].append(x)
            if s or len(new[b]) >= budgets[b] or (ended is not None and ended(new[b])):
                out[b] = (new[b], lps[b], row_cache(cache, mask[:, :C], j))
                done.add(j)
        live = len(rows) - len(done)
        if not live:
            return out
        if done:  # stopped rows leave: the live rows past the first `live` slots move into their slots
            dst = sorted(j for j in done if j < live)
            src = [j for j in range(live, len(rows)) if j not in done]    # as many
            for layer in cache.layers:
                layer.move(src, dst, live)
            mask[dst] = mask[src]
            for d, j in zip(dst, src):
                rows[d] = rows[j]
            mask, rows = mask[:live], rows[:live]
        if C == mask.shape[1]:  # the cache is full: room for ROOM more ids (at most what the rows can still feed)
            room = min(max(budgets[b] - len(new[b]) for b in rows), ROOM)
            for layer in cache.layers:
                layer.resize(slice(None), C + room)
            mask = torch.cat([mask, mask.new_zeros(len(rows), room)], -1) # (b, C + room)
        feed = torch.tensor([new[b][-1] for b in rows], device=device)    # (b,) each row's last id
        mask[:, C] = 1
        pos = mask[:, :C].sum(-1, keepdim=True)                           # (b, 1) position of the fed id
        C += 1
        logits = model(input_ids=feed[:, None], attention_mask=mask[:, :C], position_ids=pos,
                       cache=cache, use_cache=True).logits[:, -1]         # (b, V)


def generate_turn(model, tok, seqs, budgets, temperature, batch_size, stop_at_call=True):
    """One assistant turn for each sequence: the new ids, ending at the first stop token (or stop text)."""
    stops, ended, out = stop_ids(tok, stop_at_call), stop_text(tok, stop_at_call), []
    for s in range(0, len(seqs), batch_size):
        chunk = seqs[s:s + batch_size]
        out += [ids for ids, _, _ in sample(model, [None] * len(chunk), chunk, budgets[s:s + batch_size],
                                            temperature, stops, ended)]
    return out


# ---------------------------------------------------------------------------------------------
# rollouts
def respond(simulator, texts, tasks):
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


def rollout(model, tok, tasks, simulator, groups=None, temperature=1.0, max_turns=MAX_TURNS,
            max_tokens=MAX_TOKENS, batch_size=64, max_tool_rounds=None):
    """Run every task to the end, `batch_size` rollouts at a time (each batch keeps its caches
    over all its turns; a multiple of the group size G prefills each prompt once); returns one
    Rollout per task, in order."""
    groups = list(range(len(tasks))) if groups is None else groups
    rs = [Rollout(t, g, prompt_ids(tok, t)) for t, g in zip(tasks, groups)]
    for s in range(0, len(rs), batch_size):
        run(model, tok, rs[s:s + batch_size], simulator, temperature, max_turns, max_tokens, max_tool_rounds)
    for r in rs:
        m = torch.tensor([r.mask])                                      # (1, T)
        tool, summ, _, _ = segment_masks(m)
        r.tool_mask, r.summary_mask = tool[0].tolist(), summ[0].tolist()
    return rs


def run(model, tok, rs, simulator, temperature, max_turns, max_tokens, max_tool_rounds):
    """All turns of the rollouts `rs`, in place."""
    stops, ended = stop_ids(tok), stop_text(tok)
    kvs, pending = [None] * len(rs), [r.prompt for r in rs]
    live = list(range(len(rs)))
    for turn in range(max_turns):
        if not live:
            break
        past, kvs = [kvs[i] for i in live], [None] * len(rs)  # handed over to sample, which frees them
        new = sample(model, past, [pending[i] for i in live], [max_tokens - len(rs[i].ids) for i in live],
                     temperature, stops, ended)
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
            elif max_tool_rounds is not None and rounds >= max_tool_rounds:
                r.stop = "tool_rounds"
            else:
                callers.append(i)
                texts.append(text)
        live = []
        for i, (calls, obs) in zip(callers, respond(simulator, texts, [rs[i].task for i in callers])):
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
