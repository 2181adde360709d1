"""The cache-reusing sampler of rollout.py (`--sampler cached` of train.py and eval.py toucan, the
default): one assistant turn for a batch of rows, each decoded from its own KV cache.

What it does (`sample`): row b brings the KV cache of every id it has fed so far (per layer
(keys, values); none on its first turn) and the ids it still has to feed (the prompt, or the
last sampled id plus the tool-turn glue); it samples until a stop id, `ended(its ids)` or its
own budget, and gets back its new ids, their log-probs and its cache, ready for its next turn.
Rows of different lengths sit in one batch, left-padded (and from the second turn on padded in
the middle, between the cache and the new ids): a 2D attention mask over cache + new ids hides
the padding and position ids are cumsum(mask) - 1, so every row computes what it would alone.

Why it is faster than `model.generate` turn by turn (rollout.generate, the reference):
- the G rollouts of a prompt prefill it once and copy its KV cache (generate prefills it G times;
  the copies are not shared: docs/memory.md says why and what they cost);
- a row continues across turns from its cache: a new turn feeds only what is not in the cache
  yet, never the conversation again (generate re-reads the whole conversation every turn);
- the batch cache has preallocated columns (`Slots`, ROOM more whenever full) written in place:
  decoding an id copies nothing but its own keys and values; under autocast it holds them in the
  compute dtype, as attention reads them (rotary leaves keys float32, and attention would cast the
  whole cache at every step: the same numbers, cast once);
- a row that stops leaves the batch at once (its cache rows are cut out and kept, and each
  layer's buffer is reallocated for the live rows, layer by layer, so a turn's caches are never
  held twice: docs/memory.md), so no compute goes to finished rows (generate decodes padding for
  them until the batch's last row stops).

Sampling: temperature 1 samples from the softmax of the raw logits (no top-k, top-p or
repetition penalty; `draw`, by inverse transform), temperature 0 is greedy. Every sampled id
comes with its log-prob under the policy at temperature 1 (log_softmax of the raw logits in
float32, whatever the sampling temperature). The rows are sampled in row order, whatever their
slots, so the random draws are those of a batch holding the live rows in order. The reference
draws with torch.multinomial, over all rows of its batch, finished ones included, so at
temperature > 0 the two samplers do not draw the same ids (greedy ids are identical, log-probs
equal within float rounding: tests/test_rollout.py).

It is built on transformers' cache classes (`Cache`, `DynamicLayer`: the `Slots` subclass
overrides their storage), so a transformers upgrade may break it first; rollout.generate is
the plain path. Models with sliding-window layers are not supported (the cache is rebuilt as
full layers). Nothing here imports the top level: the stop ids and the stop test are parameters.

    python -m pytest -q tests/test_rollout_sample.py     # against a cacheless reference
"""
import functools

import torch
from transformers.cache_utils import Cache, DynamicLayer

ROOM = 256  # KV columns allocated at a time for the ids a batch samples (a full cache grows by this much)


class Slots(DynamicLayer):
    """One layer's KV cache in preallocated columns: buffers (B, H, cap, D) that `update` writes in
    place, so decoding an id copies nothing but its own keys and values; `keys` and `values` are
    views of the first n columns (what attention reads). The buffers hold `dtype` (None: the dtype
    of the first keys and values written), cast as they are written. Only `keep` and `grow` allocate."""

    def __init__(self, cap, dtype=None):
        super().__init__()
        self.cap, self.n, self.dtype = cap, 0, dtype

    def lazy_initialization(self, key_states, value_states):
        B, H, _, D = key_states.shape
        self.k = key_states.new_zeros(B, H, self.cap, D, dtype=self.dtype or key_states.dtype)  # (B, H, cap, D)
        self.v = value_states.new_zeros(B, H, self.cap, value_states.shape[-1],
                                        dtype=self.dtype or value_states.dtype)        # (B, H, cap, D)
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

    def grow(self, cap):
        """Move the cache into new buffers of cap >= n columns."""
        k, v = self.keys, self.values                                           # (B, H, n, D) views
        self.cap, self.n = cap, 0
        self.lazy_initialization(k, v)
        self.update(k, v)

    def keep(self, rows):
        """Keep the batch rows `rows` (an index; a repeated index copies a row) in new buffers of
        the same columns; the old ones are freed."""
        self.k, self.v = self.k.index_select(0, rows), self.v.index_select(0, rows)  # (b, H, cap, D)
        self.fill(self.n)


def batch_cache(kvs, N, cap, dtype=None):
    """Per-row caches (per layer (keys, values), each (H, n, D); None: empty) left-padded into the
    first N of `cap` columns of one batched cache of `Slots` layers (N == 0: the layers start empty
    and are allocated at the model's first update), in `dtype` (None: the rows' own). Each row's
    layers are released as they are copied (set to None), so the caches never exist twice."""
    if N == 0:
        return Cache(layer_class_to_replicate=functools.partial(Slots, cap, dtype))
    ref = next(kv for kv in kvs if kv is not None)
    n = [0 if kv is None else kv[0][0].shape[1] for kv in kvs]
    layers = []
    for layer in range(len(ref)):
        k0, v0 = ref[layer]                                                 # (H, n, D) each
        slots = Slots(cap, dtype)
        slots.lazy_initialization(k0.expand(len(kvs), *k0.shape), v0.expand(len(kvs), *v0.shape))  # (U, H, cap, D)
        for u, kv in enumerate(kvs):
            if kv is not None:
                slots.k[u, :, N - n[u]:N], slots.v[u, :, N - n[u]:N] = kv[layer]   # (H, n, D) each
                kv[layer] = None
        slots.fill(N)
        layers.append(slots)
    return Cache(layers=layers)


def draw(probs):
    """One id per row of `probs` (b, V), each drawn from its row (non-negative, summing to about 1) by
    inverse transform: the first id whose cumulative probability (float64) passes u = r × the row's
    total, r uniform in [0, 1) (float64: r ≤ 1 − 2^-53, so u < total and an id always passes), so an
    id of probability 0 is never drawn (on a GPU, whose cumsum is a tree scan, about 1e-16 a draw).
    torch.multinomial draws V exponentials a row instead: 30 ms a step for SmolLM2's 49,152 ids at
    32 rows on one CPU thread, this 3 (on an H200, 0.5 ms against 0.2 at 64 × 151,936). A row whose
    total is not finite and positive (the policy's logits were not finite) raises."""
    cdf = probs.double().cumsum(-1)                                             # (b, V)
    total = cdf[:, -1:]                                                         # (b, 1)
    if not (torch.isfinite(total) & (total > 0)).all():
        raise ValueError("sampling from probabilities that are not finite and positive (the policy's logits)")
    u = torch.rand(probs.shape[0], 1, dtype=torch.float64, device=probs.device) * total  # (b, 1) in [0, total)
    return torch.searchsorted(cdf, u, right=True)[:, 0]                         # (b,)


def forward(model, feed, pos, mask, cache):
    """One decode step through the model's own forward: the logits (b, V) of the ids `feed` (b,)
    at positions `pos` (b, 1); `mask` (b, n + 1) covers the n cache columns and the new id, whose
    keys and values the model writes into `cache`. (lib/compiled.py: the same step compiled.)"""
    return model(input_ids=feed[:, None], attention_mask=mask, position_ids=pos, cache=cache,
                 use_cache=True).logits[:, -1]


@torch.no_grad()
def sample(model, kvs, pending, budgets, temperature, stops, ended=None, decode=forward):
    """One assistant turn for each row, decoded from its KV cache.

    Row b holds `kvs[b]`, the cache of the ids it has fed so far (per layer (keys, values),
    each (H, n, D); None when it has fed nothing), and `pending[b]`, the ids to feed before it
    samples. Rows with no cache and the same pending ids (the G rollouts of one prompt) are
    prefilled once. Row b samples until a stop id, `ended(its ids)` (rollout.stop_text) or `budgets[b]` ids.
    Each decoding step is `decode(model, ids, positions, mask, cache)` (`forward`; `--sampler
    compiled`: lib.compiled.compiled). Returns per row (ids, logprobs, cache): the sampled ids,
    their log-probs under the policy at temperature 1, and the cache of every id fed (the last
    sampled id is not fed: it starts the row's next pending ids), in the autocast dtype under
    autocast. The caches passed in are consumed (emptied into the batch); a row with budget < 1
    samples nothing and gets its cache back.

    The batch cache has preallocated columns (`Slots`; ROOM more whenever it is full), written in
    place. Rows that stop are copied out of it and leave the batch at once: layer by layer, their
    rows are copied out, then the layer keeps the live rows only (`Slots.keep`, the old buffer
    freed), so what the stopped rows keep and the batch buffer never hold a row twice (but for the
    layer being copied). The rows are sampled in row order, whatever their slots, so the random
    draws are those of a batch holding the live rows in order. Long because the prefill, the
    decoding loop and the rows leaving all work on one batch cache, its mask and the slot-to-row
    map (about 90 lines, one function).
    """
    device = model.device
    stops = torch.tensor(stops, device=device)
    # under autocast the cache holds keys and values as attention reads them (rotary leaves keys float32)
    kv_dtype = torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type) else None
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
    cache = batch_cache([kvs[b] for b in uniq], N, C + room, kv_dtype)
    logits = model(input_ids=ids, attention_mask=mask[:, :C], position_ids=pos[:, N:], cache=cache,
                   use_cache=True, logits_to_keep=1).logits[:, -1]        # (U, V)
    slot = {k: u for u, k in enumerate(first)}
    sel = torch.tensor([slot[key[b]] for b in todo], device=device)       # (B,) prefill row of each row
    mask, logits = mask[sel], logits[sel]                                 # (B, cap), (B, V)
    if len(uniq) < len(todo):
        for layer in cache.layers:
            layer.keep(sel)
    rows = list(todo)                                                     # rows[j]: the row in batch slot j
    new, lps = {b: [] for b in todo}, {b: [] for b in todo}
    while True:
        order = sorted(range(len(rows)), key=rows.__getitem__)            # the slots in row order
        sub = logits[torch.tensor(order, device=device)].float()          # (b, V)
        logp = sub.log_softmax(-1)                                        # (b, V) the policy at temperature 1
        if temperature > 0:
            nxt = draw((sub / temperature).softmax(-1))                   # (b,)
        else:
            nxt = logp.argmax(-1)                                         # (b,)
        lp = logp.gather(-1, nxt[:, None])[:, 0]                          # (b,)
        stop = torch.isin(nxt, stops)                                     # (b,)
        done = []
        for j, t, x, s in zip(order, nxt.tolist(), lp.tolist(), stop.tolist()):
            b = rows[j]
            new[b].append(t)
            lps[b].append(x)
            if s or len(new[b]) >= budgets[b] or (ended is not None and ended(new[b])):
                done.append(j)
        if done:  # stopped rows leave: layer by layer, their caches are copied out, then the live rows kept
            live = [j for j in range(len(rows)) if j not in done]
            keep = mask[:, :C].bool()                                     # (b, C) each row's own columns
            kv = {j: [] for j in done}
            for i, layer in enumerate(cache.layers):
                for j in done:
                    kv[j].append((layer.keys[j][:, keep[j]], layer.values[j][:, keep[j]]))  # (H, n, D) each
                if live:
                    layer.keep(torch.tensor(live, device=device))
                else:  # the turn is over: each layer freed once its rows are out
                    cache.layers[i] = None
            for j in done:
                out[rows[j]] = (new[rows[j]], lps[rows[j]], kv[j])
            if not live:
                return out
            mask, rows = mask[live], [rows[j] for j in live]
        if C == mask.shape[1]:  # the cache is full: room for ROOM more ids (at most what the rows can still feed)
            room = min(max(budgets[b] - len(new[b]) for b in rows), ROOM)
            for layer in cache.layers:
                layer.grow(C + room)
            mask = torch.cat([mask, mask.new_zeros(len(rows), room)], -1) # (b, C + room)
        feed = torch.tensor([new[b][-1] for b in rows], device=device)    # (b,) each row's last id
        mask[:, C] = 1
        pos = mask[:, :C].sum(-1, keepdim=True)                           # (b, 1) position of the fed id
        C += 1
        logits = decode(model, feed, pos, mask[:, :C], cache)             # (b, V)
