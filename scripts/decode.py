"""Decode-step speed: one decoding step of `--sampler cached` (lib.sampler.forward, the model's
own forward) against `--sampler compiled` (lib/compiled.py, torch.compile), beside the step's
matmul floor.

    python scripts/decode.py                         # the 10M model, 64 rows, a 256-id cache, 1 thread
    python scripts/decode.py --rows 16 --context 512 --steps 50

The model is scripts/vs_trl.py's "10M" (tiny.build_model: hidden 256, 12 layers, 8 heads, on
a tokenizer trained on the shipped world). Every row holds a cache of --context columns
(lib.sampler.Slots with sample's ROOM free columns, random keys and values) and feeds one id.
The two steps run alternately on that cache, --steps times each (a step's new column is
written, then forgotten: Slots.fill), so a loaded machine slows both alike; the table shows
medians. The first compiled call compiles: its time is printed apart and counted in the totals
of --steps steps. Before timing, both steps' logits are compared.

Floor: 2 x matmul parameters x rows (every layer's q, k, v, o, gate, up and down, and the
head) plus attention's 4 x rows x heads x head size x context x layers, at the FLOP rate of
the step's own matmuls (F.linear at --rows rows, timed in the same run). Attention reads every
layer's keys and values once: that read at a measured streaming rate (a sum over a 400 MB
tensor) is printed beside it, since at long contexts the step is bound by memory, not FLOPs.
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from lib import compiled, sampler, tiny  # noqa: E402
from lib.data import load_sft, load_tasks  # noqa: E402

SHAPE = (256, 12, 8)  # hidden, layers, heads: scripts/vs_trl.py's "10M"
ROWS, CONTEXT, STEPS = 64, 256, 30  # --rows, --context, --steps
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


def cache_of(model, rows, context):
    """A batch cache of `rows` rows x `context` columns of random keys and values, ROOM columns free."""
    cfg = model.config
    D = cfg.hidden_size // cfg.num_attention_heads                              # head size
    layers = []
    for _ in range(cfg.num_hidden_layers):
        slots = sampler.Slots(context + sampler.ROOM)
        kv = torch.randn(rows, cfg.num_key_value_heads, context, D)            # (B, Hkv, n, D)
        slots.update(kv, torch.randn_like(kv))
        layers.append(slots)
    return sampler.Cache(layers=layers)


def floor(model, rows, context, n):
    """(FLOPs of one step, FLOP/s of its own matmuls at `rows` rows timed n times)."""
    cfg = model.config
    weights = [w for name, w in model.named_parameters() if w.dim() == 2 and "embed" not in name]
    weights.append(model.lm_head.weight)                                       # tied: the embedding, as the head
    xs = [torch.randn(rows, w.shape[1]) for w in weights]                      # (B, in) each
    t = median_time(lambda: [F.linear(x, w) for x, w in zip(xs, weights)], n)
    mm = 2 * rows * sum(w.numel() for w in weights)
    attention = 4 * rows * cfg.hidden_size * context * cfg.num_hidden_layers  # q.K and w.V, every head
    return mm + attention, mm / t


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=ROWS)
    p.add_argument("--context", type=int, default=CONTEXT, help="cache columns of every row")
    p.add_argument("--steps", type=int, default=STEPS, help="timed steps of each sampler")
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    world = load_tasks("data/world/rl.jsonl")
    tok = tiny.build_tokenizer(tiny.world_texts(world, load_sft("data/world/sft.jsonl")))
    model = tiny.build_model(tok, 0, *SHAPE).eval()
    cache = cache_of(model, a.rows, a.context)
    feed = torch.randint(0, model.config.vocab_size, (a.rows,))                # (B,)
    pos = torch.full((a.rows, 1), a.context)                                   # (B, 1)
    mask = torch.ones(a.rows, a.context + 1, dtype=torch.long)                 # (B, n + 1)
    steps = {"cached": sampler.forward, "compiled": compiled.compiled}

    def run(name):
        with torch.no_grad():
            logits = steps[name](model, feed, pos, mask, cache)               # (B, V)
        for layer in cache.layers:
            layer.fill(a.context)  # forget the new column
        return logits

    want = run("cached")
    t = time.perf_counter()
    got = run("compiled")
    compile_s = time.perf_counter() - t
    diff = (got - want).abs().max().item()
    times = {name: [] for name in steps}
    for _ in range(a.steps):
        for name in steps:
            t = time.perf_counter()
            run(name)
            times[name].append(time.perf_counter() - t)
    ms = {name: 1e3 * statistics.median(x) for name, x in times.items()}
    flops, rate = floor(model, a.rows, a.context, a.steps)
    floor_ms = 1e3 * flops / rate
    big = torch.ones(STREAM)
    kv_bytes = 2 * sum(layer.keys.numel() for layer in cache.layers) * 4      # keys and values, float32
    read_ms = 1e3 * kv_bytes / (4 * STREAM / median_time(big.sum, 5))
    params = sum(x.numel() for x in model.parameters()) / 1e6
    print(f"10M model ({params:.2f}M parameters), {a.rows} rows, a {a.context}-id cache, {a.threads} thread(s); "
          f"medians of {a.steps} alternating steps; logits max |compiled - cached| {diff:.1e}")
    print(f"  floor: {flops / 1e9:.2f} GFLOP at {rate / 1e9:.0f} GFLOP/s (the step's own matmuls) = {floor_ms:.1f} ms;"
          f" the cache read alone: {kv_bytes / 1e6:.0f} MB = {read_ms:.1f} ms")
    print(f"  {'sampler':>8} {'step ms':>8} {'/ floor':>8} {'compile s':>10} {f'{a.steps} steps s':>12}")
    for name in steps:
        first = compile_s if name == "compiled" else 0.0
        print(f"  {name:>8} {ms[name]:8.1f} {ms[name] / floor_ms:8.2f} {first:10.1f} "
              f"{first + a.steps * ms[name] / 1e3:12.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
