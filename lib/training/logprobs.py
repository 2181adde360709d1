"""Per-token log-probs of a causal LM, each group's shared prompt computed once (used by train.py
for the reference, old-log-prob and PPO passes, Eq. 9).

`token_logprobs` runs the trunk once and the head and log-softmax on masked positions only,
in checkpointed chunks, so (N, vocab) logits never exist at once. Given group labels, the
rows of a group (the G rollouts of a prompt) share their longest common prefix: it runs once,
its keys and values are kept (`KeepLayer`) and read by each row's pass over the rest
(`ReadLayer`), so gradients flow back into the shared prefix; this works under gradient
checkpointing (`cache_under_checkpointing`) and FSDP2: the trunk passes and the chunked head
run inside one forward of the root module (`dist.as_forward`), the only place FSDP2
holds its parameters (embeddings, final norm, lm_head) whole, and under several processes
the ranks agree on one path. Response passes take rows of similar length (`length_chunks`);
`micro_batches` packs whole groups.

    python -m pytest tests/test_train.py -k "shared or chunks or whole"; tests/test_distributed.py under FSDP2
"""
from contextlib import contextmanager
from itertools import groupby

import torch
from torch.utils.checkpoint import checkpoint
from transformers.cache_utils import Cache, DynamicLayer
from transformers.modeling_layers import GradientCheckpointingLayer

from lib.training.dist import all_sum, as_forward, world
from lib.training.precision import cast_inputs


NO_GRAD_ROWS = 8  # response rows per no-grad pass, sorted by length (little padding); measured on the 10M model,
                  # 1 CPU thread, 64 rows: 3.6 s a reference pass, against 4.6-5.7 s with all 32 rows of a micro-batch at once


def token_logprobs(model, ids, attn, mask, *, chunk=1024, groups=None, rows=None):
    """log π(ids_t | ids_<t) where mask is 1, else 0: (B, L).

    The trunk runs once; the head and log-softmax run on masked positions only, `chunk`
    positions at a time, each chunk recomputed in backward (checkpoint), so (N, vocab)
    logits never exist at once. `groups` (B,): rows with one label (the G rollouts of a
    prompt) share the prefix they have in common (the prompt): it runs once and its keys and
    values are read by each row's pass over the rest (`shared_states`), in passes of rows of
    similar length, at most `rows` rows each (None: no cap). None, a group with nothing in common, or a model
    with sliding-window layers runs every row whole (the full-sequence path). Left or right
    padding, one contiguous run of tokens per row; `mask` lies within `attn`.
    """
    sliding = "sliding_attention" in (getattr(model.config.get_text_config(decoder=True), "layer_types", None) or [])
    plan = share_plan(ids, attn, groups) if groups is not None and not sliding else None
    if groups is not None and world() > 1 and all_sum(float(plan is not None)) < world():
        plan = None  # every rank takes the same path: FSDP2 pairs up the ranks' forward calls
    # one forward of the root around the trunk and the head (FSDP2 gathers the head only there); without grad
    # each layer's input cast to the compute dtype once, not once per projection (precision.cast_inputs)
    with cast_inputs(model):
        return as_forward(model, lambda: head_logprobs(model, ids, attn, mask, chunk=chunk, plan=plan, rows=rows))


def head_logprobs(model, ids, attn, mask, *, chunk, plan, rows):
    """token_logprobs' work: the trunk (whole rows, or `shared_states` for a share plan), then
    the head and log-softmax in checkpointed chunks of masked positions."""
    if plan is None:
        pos = (attn.cumsum(-1) - 1).clamp(min=0)                               # (B, L)
        h = model.get_decoder()(input_ids=ids, attention_mask=attn, position_ids=pos).last_hidden_state  # (B, L, H) normed
        flat, at = h.flatten(0, 1), torch.arange(ids.numel(), device=ids.device).view_as(ids)  # (B·L, H), (B, L)
    else:
        flat, at = shared_states(model, *plan, rows=rows)
    sel = mask[:, 1:].bool()                                                   # (B, L-1) token t+1 from state t
    hs, tgt = flat[at[:, :-1][sel]], ids[:, 1:][sel]                           # (N, H), (N,)
    head = model.get_output_embeddings()

    def part(x, y):
        return head(x).float().log_softmax(-1).gather(-1, y[:, None])[:, 0]  # (n,)

    grad = torch.is_grad_enabled()
    lp = [checkpoint(part, hs[s:s + chunk], tgt[s:s + chunk], use_reentrant=False) if grad
          else part(hs[s:s + chunk], tgt[s:s + chunk]) for s in range(0, hs.shape[0], chunk)]
    lp = torch.cat(lp) if lp else hs[:, 0].float()  # (0,) in the graph: no tokens (all dropped) backpropagates 0
    out = torch.zeros(sel.shape, dtype=lp.dtype, device=ids.device).masked_scatter(sel, lp)  # (B, L-1)
    return torch.nn.functional.pad(out, (1, 0))                                 # (B, L)


def share_plan(ids, attn, groups):
    """What `shared_states` runs: (tokens, n, start, g, P), or None when some row's tokens are
    not one contiguous run or some group shares no token (then every row runs whole).

    tokens (B, L): each row's tokens moved to the front; n (B,): their count; start (B,): the
    column of its first token; g (B,): its group's index; P (n_groups,): the longest prefix
    every row of the group has in common, at most the shortest row's length minus one, so
    every row has at least one token of its own."""
    B, L = ids.shape
    t = torch.arange(L, device=ids.device)
    n = attn.sum(-1)                                                           # (B,)
    start = (attn.cumsum(-1) == 0).sum(-1)                                     # (B,) leading zeros
    if not bool(((t >= start[:, None]) & (t < (start + n)[:, None])).eq(attn.bool()).all()):
        return None
    valid = t < n[:, None]                                                     # (B, L)
    tokens = ids.gather(1, (start[:, None] + t).clamp(max=L - 1)) * valid      # (B, L)
    _, g = torch.unique(torch.as_tensor(groups, device=ids.device), return_inverse=True)  # (B,)
    first = torch.zeros(int(g.max()) + 1, dtype=torch.long, device=ids.device).scatter_reduce(
        0, g, torch.arange(B, device=ids.device), "amin", include_self=False)  # (n_groups,) a row of each group
    same = (tokens == tokens[first[g]]) & valid & valid[first[g]]               # (B, L)
    lcp = torch.minimum(same.long().cumprod(-1).sum(-1), n - 1)                # (B,)
    P = torch.full_like(first, L).scatter_reduce(0, g, lcp, "amin")            # (n_groups,)
    return None if bool((P < 1).any()) else (tokens, n, start, g, P)


class KeepLayer(DynamicLayer):
    """The prompt pass's cache layer: keeps this pass's keys and values. A second write (the
    backward's recompute under gradient checkpointing) replaces them with equal values."""

    def update(self, keys, values, *args, **kwargs):
        self.keys, self.values, self.is_initialized = keys, values, True
        return keys, values


class ReadLayer(DynamicLayer):
    """A response pass's cache layer: the prompt's keys and values of each row's group
    (`src` rows `sel`) in front of the new ones. It stores nothing, so a recompute reads the
    same states and gradients flow into the shared prompt pass."""

    def __init__(self, src, sel):
        super().__init__()
        self.src, self.sel, self.is_initialized = src, sel, True

    def update(self, keys, values, *args, **kwargs):
        return torch.cat([self.src.keys[self.sel], keys], -2), torch.cat([self.src.values[self.sel], values], -2)

    def get_seq_length(self):
        return self.src.keys.shape[-2]


@contextmanager
def cache_under_checkpointing(model):
    """Let HF's checkpointed decoder layers keep our caches: they write idempotently
    (KeepLayer) or only read (ReadLayer), which is what `_can_checkpoint_with_cache` asks."""
    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    for m in layers:
        m._can_checkpoint_with_cache = True
    try:
        yield
    finally:
        for m in layers:
            del m._can_checkpoint_with_cache


FILL = 0.75  # a response pass takes rows at least this share of its longest one: under 25% padding (10M model,
             # 1 thread, 64 multi-turn rows of 4-871 ids: PPO forward+backward 45-51 s -> 8.9 s, reference 9.8 -> 2.6 s)


def length_chunks(lengths, rows, fill=FILL):
    """Row indices sorted by length, longest first, cut into chunks of at most `rows` rows
    whose lengths are at least `fill` of the chunk's first."""
    parts = []
    for r in sorted(range(len(lengths)), key=lambda r: -lengths[r]):
        if not parts or len(parts[-1]) == rows or lengths[r] < fill * lengths[parts[-1][0]]:
            parts.append([])
        parts[-1].append(r)
    return parts


def shared_states(model, tokens, n, start, g, P, *, rows=None):
    """The final normed hidden states of every row, each group's prefix computed once.

    One forward over the groups' prefixes (n_groups, max P), right-padded, keeps each layer's
    keys and values; then the rows' remaining tokens in passes of rows of similar length
    (`length_chunks`; at most `rows` rows, None: no cap), each row attending to its group's prefix through a 2D mask (prefix columns,
    then its own) at positions P + j. Returns (flat states (N, H), at (B, L): the index in
    `flat` of the state at each column of the original layout)."""
    B, L = tokens.shape
    dev, nl = tokens.device, model.config.get_text_config(decoder=True).num_hidden_layers
    trunk = model.get_decoder()                                                # not model(...): see as_forward
    Pm, S = int(P.max()), n - P[g]                                             # S (B,) each row's own tokens
    t = torch.arange(L, device=dev)
    pre_mask = (t[:Pm] < P[:, None]).long()                                    # (n_groups, Pm)
    first = torch.zeros_like(P).scatter_reduce(0, g, torch.arange(B, device=dev), "amin", include_self=False)
    kept = Cache(layers=[KeepLayer() for _ in range(nl)])
    with cache_under_checkpointing(model):
        h = trunk(input_ids=tokens[first, :Pm], attention_mask=pre_mask, position_ids=t[:Pm].expand(len(P), Pm),
                  cache=kept, use_cache=False).last_hidden_state              # (n_groups, Pm, H)
        flat, idx = [h.flatten(0, 1)], torch.zeros(B, L, dtype=torch.long, device=dev)  # idx: over the tokens' layout
        idx[t[None] < P[g][:, None]] = (g[:, None] * Pm + t).masked_select(t[None] < P[g][:, None])
        off = h.shape[0] * Pm
        # several processes: cut by row count alone, so every rank makes as many forward calls
        for part in length_chunks(S.tolist(), rows or B, FILL if world() == 1 else 0.0):
            part = torch.tensor(part, device=dev)
            Sm = int(S[part].max())
            j = t[:Sm]
            own = (j < S[part][:, None]).long()                                # (b, Sm)
            x = tokens[part].gather(1, (P[g[part]][:, None] + j).clamp(max=L - 1))  # (b, Sm)
            read = Cache(layers=[ReadLayer(layer, g[part]) for layer in kept.layers])
            hp = trunk(input_ids=x, attention_mask=torch.cat([pre_mask[g[part]], own], 1),
                       position_ids=P[g[part]][:, None] + j, cache=read, use_cache=False).last_hidden_state  # (b, Sm, H)
            mine = own.bool()                                                  # (b, Sm) columns P .. n-1
            cols = (P[g[part]][:, None] + j).clamp(max=L - 1)
            idx[part[:, None].expand_as(cols)[mine], cols[mine]] = (off + torch.arange(hp.shape[0] * Sm, device=dev)
                                                                     .view(-1, Sm))[mine]
            flat.append(hp.flatten(0, 1))
            off += hp.shape[0] * Sm
    # back from the tokens' layout to the original columns (left padding shifts them)
    at = idx.gather(1, (t[None] - start[:, None]).clamp(min=0, max=L - 1))     # (B, L)
    return torch.cat(flat), at


def micro_batches(batch, idx, size, group=1):
    """Slices of `batch` rows `idx`, each trimmed to its longest sequence: whole groups (runs of
    rows with equal r // group) packed up to `size` rows, a group larger than `size` cut into
    parts of `size` rows. Yields (rows, slice)."""
    parts, whole = [], False
    for _, rows in groupby(idx, key=lambda r: r // group):
        rows = list(rows)
        if len(rows) > size:
            parts += [rows[k:k + size] for k in range(0, len(rows), size)]
            whole = False
        elif whole and len(parts[-1]) + len(rows) <= size:
            parts[-1] += rows
        else:
            parts.append(rows)
            whole = True
    for rows in parts:
        L = int(batch["attention_mask"][rows].sum(1).max())
        yield rows, {k: v[rows, :L] for k, v in batch.items()}
