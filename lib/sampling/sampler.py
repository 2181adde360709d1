"""The cache-reusing sampler of rollout.py (`--sampler cached` of train.py and eval.py toucan, the
default): one assistant turn for a batch of rows, each decoded from its own KV cache.

What it does (`sample`): row b brings the KV cache of every id it has fed so far (a `Kept`:
its group's prefix, stored once for the group, and its own columns; none on its first turn) and
the ids it still has to feed (the prompt, or the last sampled id plus the tool-turn glue); it
samples until a stop id, `ended(its ids)` or its own budget, and gets back its new ids, their
log-probs and its cache, ready for its next turn. Rows of different lengths sit in one batch,
their own columns left-padded (and from the second turn on padded in the middle, between the
cache and the new ids): a 2D attention mask over own columns + new ids hides the padding, the
prefixes are left-padded in their own store with their own mask (lib/sampling/prefix_attention.py), and
position ids are the prefix's length + cumsum(mask) - 1, so every row computes what it would alone.

Why it is faster than `model.generate` turn by turn (rollout.generate, the reference):
- the G rollouts of a prompt prefill it once (all but its last id, which each row feeds) and
  keep its keys and values once, read by all G rows in one product at each step and merged with
  each row's own columns through the log-sum-exp (lib/sampling/prefix_attention.py; generate prefills and
  keeps it G times: docs/memory.md); where that saves little (`pays`: under SHARE_BYTES of keys and
  values a layer and step, a small model or a short prompt), each row copies the prefill into its own
  columns instead and attends in one block, skipping the second attention call and the merge;
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
full layers); the attention goes through lib/sampling/prefix_attention.py, switched on inside `sample`
only. Nothing here imports the top level: the stop ids and the stop test are parameters.

    python -m pytest -q tests/test_rollout_sample.py     # against a cacheless reference
"""
import functools
from collections import Counter

import torch
from transformers.cache_utils import Cache, DynamicLayer

from lib.sampling.prefix_attention import Shared, installed

ROOM = 256  # KV columns allocated at a time for the ids a batch samples (a full cache grows by this much)
SHARE_BYTES = 4 << 20  # share a turn's prefixes when that saves 4 MiB of keys and values a layer and step (`pays`;
# docs/speed.md "The shared prefix's size rule", idle: below 3 MiB 6-17% slower shared, 3-6 even, 11-12 faster)


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


class Prefixes:
    """The shared prefixes of a batch's groups, each stored once: per layer keys and values
    `keys[l]`, `values[l]` (U, H, P, D), prefix u in its last n[u] columns (left-padded)."""

    def __init__(self, keys, values, n):
        self.keys, self.values, self.n = keys, values, n                     # n (U,)

    def columns(self, u, layer):
        """Prefix u's (keys, values) at `layer`, each (H, n[u], D)."""
        P = self.keys[layer].shape[-2]
        return self.keys[layer][u, :, P - int(self.n[u]):], self.values[layer][u, :, P - int(self.n[u]):]


class Kept:
    """What a row keeps between turns: its group's prefix, `u` of `prefixes` (one object for all the
    rows that share it), and its own columns `own` (per layer (keys, values), each (H, n, D);
    None: none yet)."""

    def __init__(self, prefixes, u, own):
        self.prefixes, self.u, self.own = prefixes, u, own

    def columns(self):
        """The row's whole cache: per layer (keys, values), each (H, prefix + own ids, D) (a copy)."""
        out = []
        for layer in range(len(self.prefixes.keys)):
            k, v = self.prefixes.columns(self.u, layer)
            if self.own is not None:
                k, v = torch.cat([k, self.own[layer][0]], 1), torch.cat([v, self.own[layer][1]], 1)
            out.append((k, v))
        return out


def prefill(model, prompts, dtype):
    """`Prefixes` of the id lists `prompts`: one forward over them, left-padded, keys and values in
    `dtype` (None: the model's)."""
    device, n = model.device, [len(p) for p in prompts]
    P = max(n)
    if P == 0:  # one-id prompts: empty prefixes
        cfg = model.config.get_text_config(decoder=True)
        D = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        empty = torch.zeros(len(prompts), cfg.num_key_value_heads, 0, D, dtype=dtype or model.dtype, device=device)
        return Prefixes([empty] * cfg.num_hidden_layers, [empty] * cfg.num_hidden_layers, torch.tensor(n, device=device))
    ids = torch.zeros(len(prompts), P, dtype=torch.long)                 # (U, P) padding: any id, masked
    mask = torch.zeros(len(prompts), P, dtype=torch.long)                # (U, P)
    for u, p in enumerate(prompts):
        ids[u, P - len(p):], mask[u, P - len(p):] = torch.tensor(p, dtype=torch.long), 1
    ids, mask = ids.to(device), mask.to(device)
    cache = Cache(layer_class_to_replicate=functools.partial(Slots, P, dtype))
    model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0), cache=cache,
          use_cache=True, logits_to_keep=1)
    return Prefixes([x.k for x in cache.layers], [x.v for x in cache.layers], torch.tensor(n, device=device))


def saved(prefixes, readers):
    """The bytes of keys and values a layer and step that storing each prefix once saves: `readers`
    {u: rows reading prefix u}, each prefix re-read by (rows - 1) rows fewer."""
    k = prefixes.keys[0]                                                     # (U, H, P, D)
    per_id = 2 * k.shape[1] * k.shape[3] * k.element_size()                  # one id's keys and values a layer
    return sum((r - 1) * int(prefixes.n[u]) for u, r in readers.items()) * per_id


def pays(prefixes, readers, least):
    """The size rule: whether the G rows of a prompt read its prefix stored once (two attention blocks
    a layer, merged) rather than each from its own columns (one block). Sharing saves `saved` bytes a
    layer and step, and costs a second attention call and a merge a layer: it pays when those bytes are
    at least `least` (SHARE_BYTES)."""
    return saved(prefixes, readers) >= least


def unshared(prefixes):
    """The prefixes moved into their rows' own columns: (`Prefixes` of as many empty prefixes, and per
    prefix its columns as a row's `own`: per layer (keys, values), each (H, n, D))."""
    own = [[prefixes.columns(u, layer) for layer in range(len(prefixes.keys))] for u in range(len(prefixes.n))]
    U, H, _, D = prefixes.keys[0].shape
    empty = [prefixes.keys[0].new_zeros(U, H, 0, D)] * len(prefixes.keys)      # (U, H, 0, D) each layer
    return Prefixes(empty, empty, torch.zeros_like(prefixes.n)), own


def gather(kept):
    """One `Prefixes` holding the prefixes of the rows' `kept` (Kept each) and each row's index in it:
    their own object when they all read one and use all of it, else a copy of the ones used (the
    rows' references released, so what nothing else holds is freed)."""
    stores = {id(k.prefixes): k.prefixes for k in kept}
    one = next(iter(stores.values()))
    if len(stores) == 1 and {k.u for k in kept} == set(range(len(one.n))):
        return one, [k.u for k in kept]
    used = {}
    for k in kept:
        used.setdefault((id(k.prefixes), k.u), (k.prefixes, k.u))
    n = torch.stack([p.n[u] for p, u in used.values()])                    # (U,)
    P, layers = int(n.max()), []
    for layer in range(len(one.keys)):
        K, V = one.keys[layer], one.values[layer]
        keys = K.new_zeros(len(used), K.shape[1], P, K.shape[3])            # (U, H, P, D)
        values = V.new_zeros(len(used), V.shape[1], P, V.shape[3])
        for i, (p, u) in enumerate(used.values()):
            keys[i, :, P - int(n[i]):], values[i, :, P - int(n[i]):] = p.columns(u, layer)
        layers.append((keys, values))
    index = {key: i for i, key in enumerate(used)}
    group = [index[(id(k.prefixes), k.u)] for k in kept]
    for k in kept:
        k.prefixes = None
    return Prefixes([k for k, _ in layers], [v for _, v in layers], n), group


def forward(model, feed, pos, mask, cache, shared):
    """One decode step through the model's own forward: the logits (b, V) of the ids `feed` (b,)
    at positions `pos` (b, 1); `mask` (b, n + 1) covers the n cache columns and the new id, whose
    keys and values the model writes into `cache`; every row also attends to its prefix in
    `shared` (lib.sampling.prefix_attention.Shared). (lib/sampling/compiled.py: the same step compiled.)"""
    return model(input_ids=feed[:, None], attention_mask=mask, position_ids=pos, cache=cache,
                 use_cache=True, shared_prefix=shared).logits[:, -1]


@torch.no_grad()
def sample(model, kvs, pending, budgets, temperature, *, stops, ended=None, decode=forward):
    """One assistant turn for each row, decoded from its KV cache.

    Row b holds `kvs[b]`, what it kept from its last turn (a `Kept`: its group's prefix and its
    own columns; None when it has fed nothing), and `pending[b]`, the ids to feed before it
    samples. Rows with no cache and the same pending ids (the G rollouts of one prompt) share
    a prefix: all of the prompt but its last id, prefilled once and stored once (or, where
    `pays` says sharing saves too little, copied into each row's own columns); each row then
    feeds that last id itself. Row b samples until a stop id, `ended(its ids)`
    (rollout.stop_text) or `budgets[b]` ids. Each decoding step is `decode(model, ids,
    positions, mask, cache, shared)` (`forward`; `--sampler compiled`: lib.sampling.compiled.compiled).
    Returns per row (ids, logprobs, kept): the sampled ids, their log-probs under the policy at
    temperature 1, and a `Kept` of every id fed (the last sampled id is not fed: it starts the
    row's next pending ids), in the autocast dtype under autocast. The caches passed in are
    consumed; a row with budget < 1 samples nothing and gets its cache back.

    The rows' own columns sit in one batch cache of preallocated columns (`Slots`; ROOM more
    whenever it is full), written in place; their prefixes in one `Prefixes`, read through
    lib.sampling.prefix_attention. Rows that stop are copied out of the batch cache and leave the batch
    at once: layer by layer, their rows are copied out, then the layer keeps the live rows only
    (`Slots.keep`, the old buffer freed), so what the stopped rows keep and the batch buffer
    never hold a row twice (but for the layer being copied); a prefix stays while the turn
    lasts. The rows are sampled in row order, whatever their slots, so the random draws are
    those of a batch holding the live rows in order. Long because the first feed, the decoding
    loop and the rows leaving all work on one batch cache, its mask and the slot-to-row map
    (about 75 lines of code, one function).
    """
    device = model.device
    stops = torch.tensor(stops, device=device)
    # under autocast the cache holds keys and values as attention reads them (rotary leaves keys float32)
    kv_dtype = torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type) else None
    out = [([], [], kv) for kv in kvs]
    todo = [b for b in range(len(kvs)) if budgets[b] >= 1]
    if not todo:
        return out
    with installed(model):
        # fresh rows: each distinct prompt but its last id prefilled once, their group's prefix
        fresh = {}
        for b in todo:
            if kvs[b] is None:
                fresh.setdefault(tuple(pending[b][:-1]), len(fresh))
        new = prefill(model, list(fresh), kv_dtype) if fresh else None
        us = [None if kvs[b] else fresh[tuple(pending[b][:-1])] for b in todo]   # a fresh row's prefix
        own = None
        if new is not None and not pays(new, Counter(u for u in us if u is not None), SHARE_BYTES):
            new, own = unshared(new)                            # one attention block
        kept = [kvs[b] or Kept(new, u, None if own is None else list(own[u])) for b, u in zip(todo, us)]
        feeds = [pending[b] if kvs[b] is not None else pending[b][-1:] for b in todo]
        prefixes, group = gather(kept)
        group = torch.tensor(group, device=device)                           # (B,) each row's prefix
        shared = Shared(prefixes.keys, prefixes.values, prefixes.n, group) if prefixes.n.any() else None
        n = [0 if k.own is None else k.own[0][0].shape[1] for k in kept]
        p = [len(f) for f in feeds]
        N, P = max(n), max(p)
        C, room = N + P, min(max(budgets[b] for b in todo) - 1, ROOM)  # columns filled; free columns to feed ids
        ids = torch.zeros(len(todo), P, dtype=torch.long)                 # (B, P) padding: any id, masked
        mask = torch.zeros(len(todo), C + room, dtype=torch.long)         # (B, cap) own columns + new ids + room
        for j, f in enumerate(feeds):
            ids[j, P - p[j]:] = torch.tensor(f)
            mask[j, N - n[j]:N] = 1
            mask[j, C - p[j]:C] = 1
        ids, mask = ids.to(device), mask.to(device)
        pos = prefixes.n[group][:, None] + (mask[:, :C].cumsum(-1) - 1).clamp(min=0)  # (B, C)
        cache = batch_cache([k.own for k in kept], N, C + room, kv_dtype)
        logits = model(input_ids=ids, attention_mask=mask[:, :C], position_ids=pos[:, N:], cache=cache,
                       use_cache=True, logits_to_keep=1, shared_prefix=shared).logits[:, -1]  # (B, V)
        rows = list(todo)                                                 # rows[j]: the row in batch slot j
        new, lps = {b: [] for b in todo}, {b: [] for b in todo}
        while True:
            order = sorted(range(len(rows)), key=rows.__getitem__)        # the slots in row order
            sub = logits[torch.tensor(order, device=device)].float()      # (b, V)
            logp = sub.log_softmax(-1)                                    # (b, V) the policy at temperature 1
            if temperature > 0:
                nxt = draw((sub / temperature).softmax(-1))               # (b,)
            else:
                nxt = logp.argmax(-1)                                     # (b,)
            lp = logp.gather(-1, nxt[:, None])[:, 0]                      # (b,)
            stop = torch.isin(nxt, stops)                                 # (b,)
            done = []
            for j, t, x, s in zip(order, nxt.tolist(), lp.tolist(), stop.tolist()):
                b = rows[j]
                new[b].append(t)
                lps[b].append(x)
                if s or len(new[b]) >= budgets[b] or (ended is not None and ended(new[b])):
                    done.append(j)
            if done:  # stopped rows leave: layer by layer, their caches are copied out, then the live rows kept
                live = [j for j in range(len(rows)) if j not in done]
                keep = mask[:, :C].bool()                                 # (b, C) each row's own columns
                kv = {j: [] for j in done}
                for i, layer in enumerate(cache.layers):
                    for j in done:
                        kv[j].append((layer.keys[j][:, keep[j]], layer.values[j][:, keep[j]]))  # (H, n, D) each
                    if live:
                        layer.keep(torch.tensor(live, device=device))
                    else:  # the turn is over: each layer freed once its rows are out
                        cache.layers[i] = None
                for j in done:
                    out[rows[j]] = (new[rows[j]], lps[rows[j]], Kept(prefixes, int(group[j]), kv[j]))
                if not live:
                    return out
                mask, rows, group = mask[live], [rows[j] for j in live], group[torch.tensor(live, device=device)]
                if shared is not None:
                    shared.rows(group)
            if C == mask.shape[1]:  # the cache is full: room for ROOM more ids (at most what the rows can still feed)
                room = min(max(budgets[b] - len(new[b]) for b in rows), ROOM)
                for layer in cache.layers:
                    layer.grow(C + room)
                mask = torch.cat([mask, mask.new_zeros(len(rows), room)], -1)  # (b, C + room)
            feed = torch.tensor([new[b][-1] for b in rows], device=device)  # (b,) each row's last id
            mask[:, C] = 1
            pos = prefixes.n[group][:, None] + mask[:, :C].sum(-1, keepdim=True)  # (b, 1) the fed id's position
            C += 1
            logits = decode(model, feed, pos, mask[:, :C], cache, shared=shared)  # (b, V)
