"""Shared-prefix attention (cascade attention, Hydragen: Juravsky et al., 2024) for lib/sampling/sampler.py:
the G rollouts of a prompt keep its keys and values once, not G times (where that saves enough:
lib.sampling.sampler.pays, the size rule).

A row's attention splits over two blocks of keys: its group's prefix (the prompt, stored once per
group) and its own columns (what the row fed since). Each block gives a partial result, the
softmax-weighted values o_i and the log-sum-exp lse_i of the scores over that block alone; `merge`
combines the two exactly:

    lse = log(e^lse_1 + e^lse_2),    o = e^(lse_1 - lse) o_1 + e^(lse_2 - lse) o_2

which is softmax attention over both blocks at once (each o_i is sum_j e^(s_j - lse_i) v_j over
its block). A group's rows read its prefix in one product: their queries stacked as the rows
of one matrix against the prefix's keys (`Shared.attend`), so the prefix is read once per
group, not once per row.

It plugs into transformers through its attention interface: `installed(model)` switches the
model to `NAME` for the sampler's forwards, and a forward given `shared_prefix=` (a `Shared`)
attends to both blocks; without it the model's plain SDPA runs (the prefixes' own prefill, and
every other pass). The model's code is unchanged: its attention module writes the new keys
and values into the cache and hands this function the row's own columns and the mask
transformers built over them.

    python -m pytest -q tests/test_prefix_attention.py     # against plain SDPA
"""
from contextlib import contextmanager

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "slca_shared_prefix"


def merge(o1, lse1, o2, lse2):
    """Softmax attention over two blocks of keys from each block's partial result: o_i (..., m, D)
    the block's softmax-weighted values, lse_i (..., m) the log-sum-exp of its scores (-inf: the
    block holds no visible key, o_i is ignored). lse = log(e^lse_1 + e^lse_2), o = e^(lse_1 - lse)
    o_1 + e^(lse_2 - lse) o_2, in float32 at least; the output in o_1's dtype."""
    top = torch.maximum(lse1, lse2)                                             # (..., m)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))          # both blocks empty: o = 0
    w1, w2 = (lse1 - top).exp()[..., None], (lse2 - top).exp()[..., None]       # (..., m, 1)
    dtype = torch.promote_types(o1.dtype, torch.float32)
    o = (w1 * o1.to(dtype) + w2 * o2.to(dtype)) / (w1 + w2).clamp_min(torch.finfo(torch.float32).tiny)
    return o.to(o1.dtype)


def attend(q, k, v, bias, scale, *, fused=None, dead=None):
    """Softmax attention of queries q (B, H, m, D) over keys and values k, v (B, H, n, D) with an
    additive `bias` broadcast to (B, H, m, n) (0 or -inf): (o (B, H, m, D), lse (B, H, m)), lse -inf
    where a query sees no key (`dead`, broadcast to (B, H, m); None: read from `bias`). `fused` (None: on a
    CPU): through torch's fused CPU kernel (the one SDPA runs there, which also returns the log-sum-exp), in
    the autocast dtype under autocast; else written out, scores in float32."""
    B, H, m, D = q.shape
    dead = ((bias == float("-inf")).all(-1) if dead is None else dead).expand(B, H, m)  # (B, H, m) no key visible
    if k.shape[-2] == 0:
        return q.new_zeros(B, H, m, D), q.new_full((B, H, m), float("-inf"), dtype=torch.float32)
    if fused or (fused is None and q.device.type == "cpu"):
        dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else k.dtype
        q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)                         # as autocast's SDPA reads them
        o, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, attn_mask=bias.to(dtype).expand(B, 1, m, k.shape[-2]), scale=scale)
    else:
        s = (q.float() @ k.float().transpose(-1, -2)) * scale + bias.float()    # (B, H, m, n)
        top = s.amax(-1, keepdim=True)
        e = (s - torch.where(torch.isfinite(top), top, torch.zeros_like(top))).exp()
        total = e.sum(-1, keepdim=True)                                         # (B, H, m, 1)
        o = ((e @ v.float()) / total.clamp_min(torch.finfo(torch.float32).tiny)).to(v.dtype)
        lse = (top + total.log())[..., 0]
    return o, lse.masked_fill(dead, float("-inf"))


class Shared:
    """A batch's shared prefixes and which one each row reads. `keys`, `values`: per layer
    (U, H, P, D), prefix u in its last n[u] columns (left-padded, the rest masked); `group` (B,):
    the prefix of each batch row. Rows are placed R to a prefix (R: the most rows of one prefix),
    so all the prefixes' rows read them in one batched product (`attend`)."""

    def __init__(self, keys, values, n, group):
        self.keys, self.values, self.n, self.last = keys, values, n, None
        U, P = len(n), keys[0].shape[-2] if keys else 0
        cols = torch.arange(P, device=n.device)
        self.bias = torch.zeros(U, 1, 1, P, device=n.device).masked_fill(
            (cols < P - n[:, None])[:, None, None], float("-inf"))                # (U, 1, 1, P)
        self.dead = (n == 0)[:, None, None]                                     # (U, 1, 1) an empty prefix
        self.rows(group)

    def rows(self, group):
        """Set the batch rows: `group` (B,), the prefix each reads."""
        U = len(self.n)
        one = torch.nn.functional.one_hot(group, U)                             # (B, U)
        self.group, self.R = group, int(one.sum(0).max())
        rank = (one.cumsum(0) - 1).gather(1, group[:, None])[:, 0]              # (B,) the row's place in its group
        self.slot = group * self.R + rank                                        # (B,) in the (U·R) layout

    def own_bias(self, mask, L, S, g, dtype):
        """The additive bias (B|1, 1, g·L, S) over the rows' own columns, and its rows that see no
        column (B|1, 1, g·L), from transformers' mask
        `mask` (B, 1, L, S) (True: seen; None: causal, the L queries the last L), its rows repeated
        for the g query heads of a kv head. Made once per forward: every layer gets the same mask."""
        if mask is not None and self.last is not None and self.last[0] is mask and self.last[1].dtype == dtype:
            return self.last[1:]
        seen = torch.ones(L, S, dtype=torch.bool, device=self.n.device).tril(S - L)[None, None] if mask is None else mask
        bias = torch.zeros(seen.shape, dtype=dtype, device=seen.device).masked_fill(~seen, float("-inf"))
        bias = bias.repeat(1, 1, g, 1)
        self.last = (mask, bias, (bias == float("-inf")).all(-1))
        return self.last[1:]

    def attend(self, layer, q, scale):
        """Partial attention of the batch rows' queries q (B, H, m, D) over their prefixes at `layer`:
        (o (B, H, m, D), lse (B, H, m)), each prefix read once by the queries of all its rows (`read`)."""
        if self.bias.dtype != q.dtype:  # cast once for the turn, not once per layer and step
            self.bias = self.bias.to(q.dtype)
        return read(q, self.layer(layer), scale)

    def layer(self, layer):
        """`layer`'s prefixes and the batch's layout, as `read` takes them: plain tensors and a number."""
        return self.keys[layer], self.values[layer], self.bias, self.dead, self.slot, self.R


def read(q, prefix, scale):
    """`Shared.attend` on plain tensors (one graph for every layer in lib/sampling/compiled.py): queries q
    (B, H, m, D) over `prefix` (Shared.layer): one layer's prefixes keys, values (U, H, P, D) under bias
    (U, 1, 1, P) and dead (U, 1, 1), row b in place slot[b] of the (U·R) layout, R rows to a prefix."""
    keys, values, bias, dead, slot, R = prefix
    B, H, m, D = q.shape
    U = keys.shape[0]
    stack = q.new_zeros(U * R, H, m, D)
    stack[slot] = q
    stack = stack.view(U, R, H, m, D).transpose(1, 2).reshape(U, H, R * m, D)     # (U, H, R·m, D)
    o, lse = attend(stack, keys, values, bias.to(q.dtype), scale, dead=dead)  # a no-op once `attend` cast it
    o = o.view(U, H, R, m, D).transpose(1, 2).reshape(U * R, H, m, D)[slot]      # (B, H, m, D)
    return o, lse.view(U, H, R, m).transpose(1, 2).reshape(U * R, H, m)[slot]


def attention(module, query, key, value, attention_mask, *, scaling=None, dropout=0.0, shared_prefix=None, **kwargs):
    """The attention function registered as NAME: with `shared_prefix` (a `Shared`), queries
    (B, Hq, L, D) attend to their prefix and to their own columns key, value (B, H, S, D) under
    transformers' mask (B, 1, L, S) (True: seen; None: causal), merged (`merge`); without, SDPA.
    Returns (B, L, Hq, D) and no weights, as SDPA's does."""
    if shared_prefix is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    B, Hq, L, D = query.shape
    H, S = key.shape[1], key.shape[2]
    g = Hq // H                                                                  # query heads per kv head
    if torch.is_autocast_enabled(query.device.type):                             # cast once for both blocks, as
        query = query.to(torch.get_autocast_dtype(query.device.type))            # autocast's SDPA would
    q = query.reshape(B, H, g * L, D)                                            # (B, H, g·L, D) heads h·g + j
    bias, dead = shared_prefix.own_bias(attention_mask, L, S, g, q.dtype)       # (B|1, 1, g·L, S), (B|1, 1, g·L)
    scale = scaling if scaling is not None else D ** -0.5
    o = merge(*shared_prefix.attend(module.layer_idx, q, scale), *attend(q, key, value, bias, scale, dead=dead))
    return o.view(B, Hq, L, D).transpose(1, 2), None                             # (B, L, Hq, D)


AttentionInterface.register(NAME, attention)
AttentionMaskInterface.register(NAME, sdpa_mask)


@contextmanager
def installed(model):
    """The model attends through `attention` (NAME) inside the block, through its own implementation after."""
    cfg = model.config
    old = cfg._attn_implementation
    cfg._attn_implementation = NAME
    try:
        yield
    finally:
        cfg._attn_implementation = old
