"""GPU step probe: one RL step of a random-initialised Qwen2 at the paper preset, per size.

    python -m tools.probe                        # 0.5B, 1.5B and 3B shapes, G = 16, on the GPU
    python -m tools.probe --sizes tiny --device cpu --prompts 1 --group-size 2 --new-tokens 8   # CPU smoke
    python -m tools.probe --sampler compiled     # sampling by lib/sampling/sampler.py, its steps compiled (lib/sampling/compiled.py)
    python -m tools.probe --sizes 3B --lora-r 8  # LoRA (lib/training/lora.py): adapters only, the reference = adapters off

For each shape (Qwen2.5's: hidden, layers, heads, kv heads, MLP width, 151,936-token
vocabulary, tied embeddings) it builds the model the way train.py does (float32 master
weights, bf16 autocast, activation checkpointing, a bf16 reference or, with --lora-r, a LoRA
adapter whose reference is the same weights with it off), samples, on weights cast to bf16 once
(lib.training.precision.cast_once, as train.rl_step), G rollouts for
each of --prompts synthetic prompts of --prompt-tokens random ids (exactly --new-tokens
each; --sampler: Hugging Face `model.generate` as rollout.generate, or lib.sampling.sampler.sample with
each decoding step through the model's forward, "cached", or lib/sampling/compiled.py's compiled step,
"compiled", whose compile time is measured apart, on a first 2-id sample), then runs the old
and reference log-prob passes and the PPO update (train.ppo_update, the release's loss
aggregation). It prints sampling tokens/s beside its memory-bandwidth bound, the most a step can reach (each decode step
reads the bf16 weights and the rows' KV cache at --bandwidth, tools/plan.py's H100 by default), the time of each
phase, and the peak GPU memory beside what tools/plan.py predicts for the states (18 B per
parameter; with LoRA 4 B per base and 16 B per adapter parameter). Without a GPU (and without
--device cpu) it says so and exits 0.
"""
import argparse
import sys
import time

import torch

from lib.training import logprobs
from lib.training import lora
from lib.training import precision
from lib.sampling import compiled
from lib.sampling import sampler
import train
from tools import plan

SHAPES = {  # Qwen2.5 configs: hidden, layers, heads, kv heads, intermediate
    "tiny": (64, 2, 4, 2, 128),
    "0.5B": (896, 24, 14, 2, 4864),
    "1.5B": (1536, 28, 12, 2, 8960),
    "3B": (2048, 36, 16, 2, 11008),
}
VOCAB = 151936  # Qwen2.5's tokenizer
SAMPLERS = ("generate", "cached", "compiled")  # --sampler (the first: the default)


def sample_rows(model, prompt, p, B, sync, t):
    """--new-tokens ids for each of the B rows of `prompt` (B, T) with --sampler (no stop ids).
    Returns (prompt and ids (B, T + new), compile seconds or None, the sampling clock's start)."""
    compile_s = None
    if p.sampler == "generate":
        model.config.use_cache = True
        with torch.no_grad():
            out = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), do_sample=True,
                                 max_new_tokens=p.new_tokens, min_new_tokens=p.new_tokens, top_k=0, top_p=1.0)
        model.config.use_cache = False
    else:  # exactly --new-tokens ids a row: no stop ids
        decode = compiled.compiled if p.sampler == "compiled" else sampler.forward
        rows = prompt.tolist()
        if p.sampler == "compiled":
            sampler.sample(model, [None] * B, rows, [2] * B, 1.0, stops=[], decode=decode)  # compiles
            sync()
            compile_s = time.time() - t
            t = time.time()
        new = sampler.sample(model, [None] * B, rows, [p.new_tokens] * B, 1.0, stops=[], decode=decode)
        out = torch.cat([prompt, torch.tensor([ids for ids, _, _ in new], device=p.device)], 1)  # (B, T + new)
    return out, compile_s, t


def build(size, p):
    """The random-initialised policy of one shape as train.py builds it, its reference and optimizer,
    and the flags: (cfg, args, model, ref, opt, parameters, the plan's state bytes)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    h, layers, heads, kv, inter = SHAPES[size]
    cfg = Qwen2Config(vocab_size=VOCAB if size != "tiny" else 512, hidden_size=h, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv, intermediate_size=inter,
                      tie_word_embeddings=True, max_position_embeddings=32768)
    a = train.get_args(["--model", "probe", "--data", "data/world/rl.jsonl", "--eval-data", "", "--sft-data", "",
                        "--group-size", str(p.group_size), "--prompts-per-step", str(p.prompts),
                        "--mini-batch", str(p.prompts), "--micro-batch", str(p.micro_batch), "--device", p.device,
                        "--dtype", "bfloat16"])
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg).to(p.device)                             # float32 master weights
    model.activation_checkpointing_enable()
    model.config.use_cache = False
    n_params = sum(x.numel() for x in model.parameters())
    if p.lora_r:
        model = lora.add_adapter(model, p.lora_r, 2.0 * p.lora_r, lora.DROPOUT, lora.TARGETS, 0)
        ref, states = model, 4 * n_params + 16 * plan.adapter_params(cfg, p.lora_r)
    else:
        ref, states = Qwen2ForCausalLM(cfg).to(p.device, torch.bfloat16).eval().requires_grad_(False), 18 * n_params
    opt = torch.optim.AdamW([x for x in model.parameters() if x.requires_grad], lr=a.lr, weight_decay=a.weight_decay)
    return cfg, a, model, ref, opt, n_params, states


def probe(size, p):
    cfg, a, model, ref, opt, n_params, states = build(size, p)
    cuda = p.device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    B, T = p.prompts * p.group_size, p.prompt_tokens
    prompt = torch.randint(0, cfg.vocab_size, (p.prompts, T), device=p.device).repeat_interleave(p.group_size, 0)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    times = {}
    with precision.autocast(a.dtype, a.device), precision.cast_once(model, a.dtype):
        sync()
        t = time.time()
        out, compile_s, t = sample_rows(model, prompt, p, B, sync, t)
        sync()
        times["sample"] = time.time() - t
        resp = torch.zeros_like(out)
        resp[:, T:] = 1
        tool = resp.clone()
        tool[:, T + p.new_tokens // 2:] = 0
        batch = {"input_ids": out, "attention_mask": torch.ones_like(out), "response_mask": resp,
                 "tool_mask": tool, "summary_mask": resp - tool}
        A = torch.randn(B, 1, device=p.device) * resp                    # (B, L)
        t = time.time()
        lp = lambda m: torch.cat([logprobs.token_logprobs(m, *(batch[k][r] for k in (  # noqa: E731
            "input_ids", "attention_mask", "response_mask"))) for r in torch.arange(B).split(a.micro_batch)])
        with torch.no_grad():
            old = lp(model)
            with lora.adapters_off(ref):
                refl = lp(ref)
        sync()
        times["old+ref"] = time.time() - t
    with precision.autocast(a.dtype, a.device):
        t = time.time()
        train.ppo_update(model, opt, {**batch, "old_logprobs": old, "ref_logprobs": refl, "advantages": A},
                         train.Settings.of(a), 0)
        sync()
        times["update"] = time.time() - t
    peak = torch.cuda.max_memory_allocated() / 1e9 if cuda else float("nan")
    key = 4 if p.sampler == "generate" else 2                                      # bytes of a cached key (plan.kv_bytes)
    step_bytes = 2 * n_params + B * (T + p.new_tokens / 2) * plan.kv_bytes(cfg, key)  # one decode step's reads
    bound = B * p.bandwidth / step_bytes                                           # tok/s at most
    print(f"{size:>5} {n_params / 1e9:6.2f}B{f' LoRA r {p.lora_r}' if p.lora_r else ''}  "
          f"sample {B * p.new_tokens / times['sample']:8.0f} tok/s (bandwidth bound {bound:.0f} at {p.bandwidth / 1e12:.2f} TB/s)  "
          + "  ".join(f"{k} {v:6.1f}s" for k, v in times.items())
          + f"  step {sum(times.values()):6.1f}s  peak {peak:6.1f} GB  (plan: states {states / 1e9:.1f} GB)"
          + (f"  (sampler compile {compile_s:.1f}s)" if compile_s is not None else ""))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", nargs="+", default=["0.5B", "1.5B", "3B"], choices=list(SHAPES))
    p.add_argument("--device", default="cuda")
    p.add_argument("--group-size", type=int, default=16)
    p.add_argument("--prompts", type=int, default=2, help="prompts per step (G rollouts each)")
    p.add_argument("--prompt-tokens", type=int, default=2048)
    p.add_argument("--new-tokens", type=int, default=1024, help="sampled tokens per rollout")
    p.add_argument("--micro-batch", type=int, default=8)
    p.add_argument("--lora-r", type=int, default=0, help="LoRA rank (0: full fine-tuning)")
    p.add_argument("--bandwidth", type=float, default=plan.BANDWIDTH,
                   help="memory bandwidth of the GPU, bytes/s, for the decode bound (H200: 4.8e12)")
    p.add_argument("--sampler", choices=SAMPLERS, default=SAMPLERS[0],
                   help="generate = model.generate; cached = lib/sampling/sampler.py; compiled = its steps compiled")
    p = p.parse_args(argv)
    if p.device.startswith("cuda") and not torch.cuda.is_available():
        print("no GPU here: tools/probe.py measures a GPU step; run it on a machine with CUDA "
              "(or pass --device cpu for a smoke run)")
        return 0
    for size in p.sizes:
        probe(size, p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
