"""Decode-step speed: one decoding step of `--sampler cached` (lib.sampling.sampler.forward, the model's
own forward) against `--sampler compiled` (lib/sampling/compiled.py, torch.compile), beside the step's
matmul floor.

    python -m tools.decode                         # the 10M model, 64 rows, caches of 64, 256 and 512 ids, 1 thread
    python -m tools.decode --rows 16 --contexts 1024 --steps 50
    python -m tools.decode --dtype bfloat16        # bf16 autocast: the weights cast once against at every step

The model is tools/vs_trl.py's "10M" (tiny.build_model: hidden 256, 12 layers, 8 heads, on
a tokenizer trained on the shipped world). For each of --contexts, every row holds a cache of
that many columns (lib.sampling.sampler.Slots with sample's ROOM free columns, random keys and values)
and feeds one id. The two steps run alternately on that cache, --steps times each (a step's
new column is written, then forgotten: Slots.fill), so a loaded machine slows both alike; the
table shows medians. The first compiled call compiles (one graph serves every context and row
count): its time is printed apart, with the totals of --steps steps at the first context.
Before timing, both steps' logits are compared at each context.

--dtype bfloat16 runs the steps as train.py samples in bf16: under autocast on float32 weights,
each matmul weight cast once beforehand (lib.training.precision.cast_once), and adds a third step timed in
the same loop, `recast`: the cached step on a float32 copy of the model under autocast alone, which
casts every weight at every step (train.py's sampling before cast_once); `recast/cached` is the
ratio. The cache holds bf16, as lib.sampling.sampler.sample stores it under autocast (the rotated keys
come out float32 and are cast as written), the floor's matmuls run in bf16.

Floor: 2 x matmul parameters x rows (every layer's q, k, v, o, gate, up and down, and the
head) plus attention's 4 x rows x heads x head size x context x layers, at the FLOP rate of
the step's own matmuls (F.linear at --rows rows, timed in the same loop as the steps).
Attention reads every layer's keys and values once: that read at a measured streaming rate (a
sum over a 400 MB tensor) is printed beside it, since at long contexts the step is bound by
memory, not FLOPs.
"""
import argparse
import copy
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from lib.inputs.data import load_sft, load_tasks
from lib.training import tiny
from lib.training.precision import autocast, cast_once
from lib.sampling import compiled, sampler

SHAPE = (256, 12, 8)  # hidden, layers, heads: tools/vs_trl.py's "10M"
ROWS, CONTEXTS, STEPS = 64, (64, 256, 512), 30  # --rows, --contexts, --steps
STREAM = 100_000_000  # float32 values summed to measure the streaming rate (400 MB, past every cache)


def median_time(f, n):
    """Median seconds of n calls of f, after one call."""
    f()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def cache_of(model, rows, context, dtype=None):
    """A batch cache of `rows` rows x `context` columns of random keys and values in `dtype` (None:
    float32), ROOM columns free."""
    cfg = model.config
    D = cfg.hidden_size // cfg.num_attention_heads                              # head size
    layers = []
    for _ in range(cfg.num_hidden_layers):
        slots = sampler.Slots(context + sampler.ROOM, dtype)
        kv = torch.randn(rows, cfg.num_key_value_heads, context, D)            # (B, Hkv, n, D)
        slots.update(kv, torch.randn_like(kv))
        layers.append(slots)
    return sampler.Cache(layers=layers)


def matmuls(model, rows, dtype=torch.float32):
    """The step's matmuls alone at `rows` rows in `dtype` (every layer's q, k, v, o, gate, up and
    down, and the head): a function running them, and their FLOPs."""
    weights = [w for name, w in model.named_parameters() if w.dim() == 2 and "embed" not in name]
    weights.append(model.lm_head.weight)                                       # tied: the embedding, as the head
    weights = [w.detach().to(dtype) for w in weights]
    xs = [torch.randn(rows, w.shape[1], dtype=dtype) for w in weights]         # (B, in) each
    return (lambda: [F.linear(x, w) for x, w in zip(xs, weights)]), 2 * rows * sum(w.numel() for w in weights)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=ROWS)
    p.add_argument("--contexts", type=int, nargs="+", default=list(CONTEXTS), help="cache columns of every row")
    p.add_argument("--steps", type=int, default=STEPS, help="timed steps of each sampler at each context")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32", help="compute dtype (autocast)")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    world = load_tasks("data/world/rl.jsonl")
    tok = tiny.build_tokenizer(tiny.world_texts(world, load_sft("data/world/sft.jsonl")))
    model = tiny.build_model(tok, 0, *SHAPE).eval()
    mm = matmuls(model, a.rows, getattr(torch, a.dtype))
    stream = 4 * STREAM / median_time(torch.ones(STREAM).sum, 5)              # bytes/s
    params = sum(x.numel() for x in model.parameters()) / 1e6
    print(f"10M model ({params:.2f}M parameters), {a.rows} rows, {a.threads} thread(s), {a.dtype}; medians of "
          f"{a.steps} alternating steps; floor = FLOPs at the step's own matmuls' rate; read = the cache's keys and "
          f"values at {stream / 1e9:.1f} GB/s")
    recast = copy.deepcopy(model) if a.dtype != "float32" else None           # float32 weights, cast at every step
    print(f"{'context':>7} {'cached ms':>9} {'compiled ms':>11} {'floor ms':>8} {'GFLOP':>6} {'GFLOP/s':>7} "
          f"{'read ms':>7} {'cached/floor':>12} {'compiled/floor':>14} {'max |diff|':>10}"
          + (f" {'recast ms':>9} {'recast/cached':>13} {'recast |diff|':>13}" if recast else ""))
    with cast_once(model, a.dtype):                                            # as train.py samples
        first, compile_s = table(a, model, recast, mm, stream)
    saved = (first["cached"] - first["compiled"]) / 1e3                        # s a step
    print(f"compile (the first compiled call): {compile_s:.1f} s; {a.steps} steps at context {a.contexts[0]}, "
          f"compile included: cached {a.steps * first['cached'] / 1e3:.2f} s, compiled "
          f"{compile_s + a.steps * first['compiled'] / 1e3:.2f} s; the compile is paid back after "
          + (f"{compile_s / saved:.0f} steps" if saved > 0 else "no number of steps"))
    return 0


def table(a, model, recast, mm, stream):
    """The table's rows, one per context of `a.contexts`: the steps timed alternately on `model`
    (and the `recast` step on that float32 copy, when given), beside their floor. Returns (the
    first context's median ms per step, the compile's seconds)."""
    (mm, mm_flops), steps = mm, {"cached": sampler.forward, "compiled": compiled.compiled, "recast": sampler.forward}
    compile_s, first = None, None  # the compile time; the first context's step times
    for n in a.contexts:
        cache = cache_of(model, a.rows, n, None if a.dtype == "float32" else getattr(torch, a.dtype))
        feed = torch.randint(0, model.config.vocab_size, (a.rows,))            # (B,)
        pos = torch.full((a.rows, 1), n)                                       # (B, 1)
        mask = torch.ones(a.rows, n + 1, dtype=torch.long)                     # (B, n + 1)

        def run(name):
            with torch.no_grad(), autocast(a.dtype, "cpu"):
                logits = steps[name](recast if name == "recast" else model, feed, pos, mask, cache, shared=None)  # (B, V) no prefix
            for layer in cache.layers:
                layer.fill(n)  # forget the new column
            return logits

        want = run("cached")
        t = time.perf_counter()
        diff = (run("compiled") - want).abs().max().item()
        compile_s = time.perf_counter() - t if compile_s is None else compile_s
        jobs = {"cached": lambda: run("cached"), "compiled": lambda: run("compiled"), "matmuls": mm}
        if recast:
            jobs["recast"] = lambda: run("recast")
            recast_diff = (run("recast") - want).abs().max().item()
        times = {name: [] for name in jobs}
        for _ in range(a.steps):
            for name, job in jobs.items():
                t = time.perf_counter()
                job()
                times[name].append(time.perf_counter() - t)
        ms = {name: 1e3 * statistics.median(x) for name, x in times.items()}
        rate = mm_flops / ms["matmuls"] * 1e3                                   # FLOP/s
        flops = mm_flops + 4 * a.rows * model.config.hidden_size * n * model.config.num_hidden_layers  # + q.K, w.V
        floor_ms = 1e3 * flops / rate
        read_ms = 1e3 * 2 * sum(layer.keys.nbytes for layer in cache.layers) / stream  # keys and values
        print(f"{n:>7} {ms['cached']:9.1f} {ms['compiled']:11.1f} {floor_ms:8.1f} {flops / 1e9:6.2f} {rate / 1e9:7.0f} "
              f"{read_ms:7.1f} {ms['cached'] / floor_ms:12.2f} {ms['compiled'] / floor_ms:14.2f} {diff:10.1e}"
              + (f" {ms['recast']:9.1f} {ms['recast'] / ms['cached']:13.2f} {recast_diff:13.1e}" if recast else ""))
        first = first or ms
    return first, compile_s


if __name__ == "__main__":
    sys.exit(main())
