"""The compiled decode step of `--sampler compiled`: lib.sampling.sampler.sample with each one-id decoding
step run through torch.compile instead of the model's own forward.

Why: at one id per row the model's forward spends much of a step around its arithmetic (the
mask it builds every step, SDPA's CPU kernel with a mask, the cache classes, dozens of small
ops per layer). `step` is the same arithmetic for one new id per row, written as one pure
function of tensors: the new id's keys and values come out of it (`decode` writes them into
the cache with Slots.update, outside the compiled graph) and attention reads the cache's
columns plus the new id's own key, so the graph never mutates its inputs. torch.compile
(inductor) turns it into the matmuls and a few fused kernels, one call per step. What is left
is the matmuls and the read of every layer's keys and values: past a few hundred ids of cache
that read, not the FLOPs, bounds a step on a CPU (tools/decode.py prints both).

Shapes: the rows (live rows leave the batch) and the cache columns (one more each step) are
dynamic dimensions (`torch.compile(dynamic=True)`), so one graph serves every step of every
turn, whatever the rows and columns. A single row runs as two (torch.compile specialises a
size of 1: it would compile a second graph), its cache copied as views of a buffer like the
cache's own (a plain tensor fails a guard on the view's base: a second graph too). The first
call compiles (a minute on a loaded 2-core CPU for the 10M model, much less once inductor's
on-disk cache holds it: TORCHINDUCTOR_CACHE_DIR); tools/decode.py counts that time.

One layer, compiled once: `layer_step` is a nested compile region
(torch.compiler.nested_compile_region), so dynamo traces the first layer and calls that one graph
for every layer, the layer's weights its inputs, not constants (30 unrolled layers of SmolLM2 did
not finish compiling in 15 minutes; one region compiles in the time of one layer, whatever the
depth: tests/test_compiled.py counts one region and L calls of it).

What it computes, per layer of a Qwen2 or a Llama (SmolLM2; Qwen2ForCausalLM and LlamaForCausalLM only,
with their own forward: a model with forward hooks or a forward of its own is refused, since `step`
reads its weights and would skip them; FSDP2 shards through such hooks, so train.py refuses this sampler under
torchrun, at start): the layer's own modules (norms, projections, MLP, rotary embedding), with
attention as one softmax in float32 over the cache columns (plus the mask's bias) and the new
id, taken as two blocks under one max (no concatenated copy of the cache). Greedy ids equal
`--sampler cached`'s and log-probs agree within 1e-5 in float32 (tests/test_rollout_sample.py
runs `step` uncompiled through `sample` against a cacheless reference; tests/test_compiled.py
compiled: two turns of rows leaving the batch down to one, the cache growing, in one graph).

    python -m pytest -q tests/test_compiled.py
"""
import copy
import functools
from contextlib import contextmanager

import torch
import torch.fx.experimental._config
from transformers import LlamaForCausalLM, Qwen2ForCausalLM
from transformers.models.qwen2.modeling_qwen2 import apply_rotary_pos_emb

from lib.sampling.prefix_attention import merge, read

FORWARDS = (Qwen2ForCausalLM.forward, LlamaForCausalLM.forward)  # the models whose layers `layer_step` restates


@torch.compiler.nested_compile_region
def layer_step(layer, x, cos, sin, bias, *, K, V, prefix=None):
    """One decoder layer for one new id per row: hidden states x (b, 1, E), its rotary cos and sin
    (b, 1, D), the layer's cache K, V (b, Hkv, n, D) and additive `bias` (b, n) (0 or -inf); with
    `prefix` (lib.sampling.prefix_attention.Shared.layer: this layer's prefixes and the batch's layout),
    each row also attends to its prefix, merged through the log-sum-exp. Its arguments are tensors,
    numbers and the layer only, so one graph serves every layer. Returns (x, the new id's keys, its
    values), each (b, Hkv, 1, D)."""
    att = layer.self_attn
    b, H, n, D = K.shape                                                   # rows, kv heads, columns, head size
    h = layer.input_layernorm(x)                                           # (b, 1, E)
    q = att.q_proj(h).view(b, 1, -1, D).transpose(1, 2)                    # (b, Hq, 1, D)
    k = att.k_proj(h).view(b, 1, H, D).transpose(1, 2)                     # (b, H, 1, D)
    v = att.v_proj(h).view(b, 1, H, D).transpose(1, 2)                     # (b, H, 1, D)
    q, k = apply_rotary_pos_emb(q, k, cos, sin)
    q = q.reshape(b, H, -1, D)                                             # (b, H, g, D) the g query heads of a kv head
    s = q @ K.transpose(2, 3) * att.scaling + bias[:, None, None]          # (b, H, g, n) the cache's scores
    s_new = (q * k).sum(-1, keepdim=True) * att.scaling                    # (b, H, g, 1) the new id's
    top = torch.maximum(s.amax(-1, keepdim=True), s_new).float()           # (b, H, g, 1) softmax over both, in float32
    e, e_new = (s - top).exp(), (s_new - top).exp()                        # (b, H, g, n), (b, H, g, 1)
    total = e.sum(-1, keepdim=True) + e_new                                # (b, H, g, 1)
    o = (e.to(V.dtype) @ V + e_new.to(v.dtype) * v) / total.to(v.dtype)   # (b, H, g, D)
    if prefix is not None:
        o = merge(*read(q, prefix, att.scaling), o, (top + total.log())[..., 0])
    x = x + att.o_proj(o.reshape(b, 1, -1))                                # (b, 1, E)
    return x + layer.mlp(layer.post_attention_layernorm(x)), k, v          # (b, 1, E)


def step(model, ids, pos, bias, keys, values, *, shared=None):
    """One decode step: logits (b, V) for the ids (b,) at positions `pos` (b, 1), each row
    attending to its prefix in `shared` (None: none), its cache columns (per layer `keys[l]`,
    `values[l]`, each (b, Hkv, n, D)) with additive `bias` (b, n), then to the new id. Returns
    (logits, per layer the new id's keys and values)."""
    m = model.model
    x = m.embed_tokens(ids[:, None])                                       # (b, 1, E)
    cos, sin = m.rotary_emb(x, pos)                                        # (b, 1, D) each
    new = []
    for i, (layer, K, V) in enumerate(zip(m.layers, keys, values)):
        x, k, v = layer_step(layer, x, cos, sin, bias, K=K, V=V, prefix=None if shared is None else shared.layer(i))
        new.append((k, v))
    return model.lm_head(m.norm(x))[:, 0], new                             # (b, V)


def decode(model, feed, pos, mask, cache, *, shared=None, run=step):
    """sample's decode step through `run` (`step`, or compiled: `compiled` below): the logits (b, V) of the
    ids `feed` (b,) at `pos` (b, 1); `mask` (b, n + 1) covers the n cache columns and the new id,
    whose keys and values are then written into the cache (Slots.update, in place); each row also
    attends to its prefix in `shared` (lib.sampling.prefix_attention.Shared; None: none)."""
    if model._forward_hooks or model._forward_pre_hooks or type(model).forward not in FORWARDS:
        raise ValueError("--sampler compiled runs a Qwen2's or a Llama's weights, not its forward: "
                         "a model with forward hooks or its own forward needs --sampler cached")
    b, n = mask.shape[0], mask.shape[1] - 1
    w = max(n, 2)  # a first step reads one column: read the new id's free column too, masked (one graph)
    bias = torch.full((b, w), float("-inf"), device=mask.device)
    bias[:, :n] = bias[:, :n].masked_fill(mask[:, :n] == 1, 0.0)              # (b, w)
    layers = cache.layers
    keys, values = [x.k[:, :, :w] for x in layers], [x.v[:, :, :w] for x in layers]  # (b, Hkv, w, D) each
    if b == 1:  # one row runs as two, its cache as views of a buffer (the module docstring: one graph)
        feed, pos, bias = feed.repeat(2), pos.repeat(2, 1), bias.repeat(2, 1)
        keys = [x.k.repeat(2, 1, 1, 1)[:, :, :w] for x in layers]          # (2, Hkv, w, D) each
        values = [x.v.repeat(2, 1, 1, 1)[:, :, :w] for x in layers]
        if shared is not None:
            shared = copy.copy(shared)
            shared.rows(shared.group.repeat(2))
    for x in [*keys, *values, *([] if shared is None else [*shared.keys, *shared.values])]:
        torch._dynamo.mark_static(x, 1)  # the heads and the head size are the model's: constants of the graph
        torch._dynamo.mark_static(x, 3)
    logits, new = run(model, feed, pos, bias, keys, values, shared=shared)
    for layer, (k, v) in zip(layers, new):
        layer.update(k[:b], v[:b])
    return logits[:b]


@functools.cache
def compiled_step():
    """`step` through torch.compile, made at the first call (building the compiler takes a second)."""
    return torch.compile(step, dynamic=True)


@contextmanager
def settings():
    """What `step` compiles under: sizes that happen to be equal (the prefixes' count and the rows', say) are
    not assumed equal (one graph), and the model's float constants (a norm's epsilon, the attention scale)
    stay constants, not graph inputs read back with .item()."""
    with torch.fx.experimental._config.patch(use_duck_shape=False), torch._dynamo.config.patch(specialize_float=True):
        yield


def compiled(model, feed, pos, mask, cache, shared=None):
    """`decode` through the compiled `step`: `--sampler compiled`'s decode step."""
    with settings():
        return decode(model, feed, pos, mask, cache, shared=shared, run=compiled_step())
