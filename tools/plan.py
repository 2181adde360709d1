"""Memory and time of one RL step of the paper preset, from the model's own passes.

    python -m tools.plan                      # Qwen2.5-3B, 1 and 8 GPUs of 80 GB
    python -m tools.plan --model 7B --gpus 4 8
    python -m tools.plan --cards              # memory per GPU with and without LoRA, the smallest card each fits

Measured here (CPU, no weights: the model is built on the meta device from its config): the
parameter count, and the FLOPs of one forward and one backward pass per token at the
trajectory's length, counted by torch.utils.flop_counter on one decoder layer and the LM head
(torch counts causal attention as full; it is halved here). Computed from the config: bytes
of the weights, gradients, AdamW moments and reference, of the KV cache and of the
activations kept under gradient checkpointing. Assumed (flags): the lengths, the MFU of the
training passes, and the GPU's peak bf16 FLOP/s and memory bandwidth; sampling is taken at
its bandwidth bound (every decode step reads the weights and the batch's KV cache once: each prompt's once
for its G rows, lib/sampling/prefix_attention.py, and each row's response).

The passes of one step (the paper preset: --old-logprobs recompute, β > 0, gradient
checkpointing), each over every response token and each group's prompt once (T tokens):
sampling (one forward), old and reference log-probs (two forwards, no grad), and the update
(forward, the checkpointed forward again, and a backward of twice a forward's FLOPs).

With LoRA (train.py --lora-r, one process): the base stays float32 and frozen (4 B a parameter, no
gradient, no AdamW state), the reference is the base with the adapters off (no copy), and each
adapter parameter costs 16 B; activations and the KV cache are as without. `--cards` prints the
peak per GPU of several settings and the smallest of CARDS each fits (docs/memory.md).

Besides the passes (`casts`, `endpoint_s`): the casts of the float32 weights to bf16 (their bytes
moved at the bandwidth, and the cast copy sampling holds), and the time the step waits for the
simulator and the judge, from stated seconds per request (flags; assumed, not measured).
"""
import argparse

import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import Qwen2Config, Qwen2ForCausalLM

from lib.training.lora import TARGETS

SHAPES = {  # Qwen2.5 configs: hidden, intermediate, layers, heads, kv heads, tied embeddings
    "3B": (2048, 11008, 36, 16, 2, True),
    "7B": (3584, 18944, 28, 28, 4, False),
}
VOCAB = 151_936        # Qwen2.5's padded vocabulary
STATE_BYTES = 18       # per parameter: float32 weights, gradients, two AdamW moments (16) + bf16 reference (2)
REF_EMBED_BYTES = 2    # per embedding parameter in one process: the reference keeps its embeddings float32
                       # (lib.training.precision.frozen_cast), 4 B instead of the 2 counted in STATE_BYTES
BASE_BYTES = 4         # per parameter with LoRA: the frozen float32 base (lib/training/lora.py)
ADAPTER_BYTES = 16     # per adapter parameter: float32 weights, gradients, two AdamW moments
CARDS = (24, 80, 141)  # GB: an RTX 4090 / L4-class card, A100 / H100 80 GB, H200 141 GB (NVIDIA's datasheets)
BF16 = 2               # bytes
LOGIT_CHUNK = 1024     # positions per LM-head chunk (lib/training/logprobs.py)
PEAK = 989e12          # H100 SXM dense bf16 FLOP/s (NVIDIA's datasheet)
BANDWIDTH = 3.35e12    # H100 SXM HBM3 bytes/s (NVIDIA's datasheet)
MFU = 0.40             # assumed for the training and log-prob passes
PROMPT, RESPONSE = 2048, 8192  # tokens: an assumed prompt, and the response cap of the paper's recipe
ROLLOUTS, PROMPTS = 2048, 128  # per step: 128 prompts x G = 16
GROUP = ROLLOUTS // PROMPTS    # G: the rows that share a prompt, its KV cache held once while sampling
STEPS_PER_EPOCH = 31_818 // 128  # the release's RL split
FREE = 0.10            # of a card, left to what is not counted here (CUDA context, fragmentation, the sampler's
                       # transients): vLLM's default gpu_memory_utilization is 0.9
GEN_BATCH = 16         # --gen-batch of the paper preset: the most rows, a multiple of G, whose sampling peak on one
                       # 80 GB GPU leaves FREE (tests/test_recipe.py)
CAST = 6               # bytes moved by casting one weight: a float32 read and a bf16 write
NO_GRAD_ROWS = 8       # rows per no-grad log-prob pass (lib/training/logprobs.py)
SIM_S, JUDGE_S = 2.0, 20.0  # assumed s per simulator request (a short tool answer) and per judge rating (GPT-OSS
                            # reasoning within its 8,192 tokens, lib/frozen/judges.py); not measured: flags
CALLS = 3.0            # assumed simulator requests (tool calls) per rollout: a flag
SIM_WORKERS = 20       # simulator requests in flight per rank (lib/frozen/llm.py Client's workers, the release's 20)
JUDGE_WORKERS = 16     # judge requests in flight per rank (rewards.score_rollouts' workers)


def config(name):
    h, inter, layers, heads, kv, tied = SHAPES[name]
    c = Qwen2Config(vocab_size=VOCAB, hidden_size=h, intermediate_size=inter, num_hidden_layers=layers,
                    num_attention_heads=heads, num_key_value_heads=kv, tie_word_embeddings=tied)
    c._attn_implementation = "sdpa"
    return c


def measure(cfg, length):
    """(parameters, forward FLOPs per token, backward / forward) of the whole model, the layers
    counted on one meta-device layer at `length` positions, causal attention halved."""
    with torch.device("meta"):
        m = Qwen2ForCausalLM(cfg)
    n = sum(p.numel() for p in m.parameters())
    layer, h = m.model.layers[0], cfg.hidden_size
    x = torch.zeros(1, length, h, device="meta", requires_grad=True)                 # (1, L, h)
    with FlopCounterMode(display=False) as fwd:
        y = layer(x, position_embeddings=m.model.rotary_emb(x, torch.arange(length, device="meta")[None]))
        y = y[0] if isinstance(y, tuple) else y
        logits = m.lm_head(y)                                                         # (1, L, V)
    with FlopCounterMode(display=False) as bwd:
        logits.sum().backward()
    head = 2 * length * h * cfg.vocab_size
    attn_full = 4 * length * length * h                                               # torch's count for sdpa
    per_layer = fwd.get_total_flops() - head - attn_full / 2
    return n, (cfg.num_hidden_layers * per_layer + head) / length, bwd.get_total_flops() / fwd.get_total_flops()


def adapter_params(cfg, r):
    """Parameters of rank-r LoRA adapters on every TARGETS linear layer: r x (in + out) each."""
    with torch.device("meta"):
        m = Qwen2ForCausalLM(cfg)
    return sum(r * (x.in_features + x.out_features) for name, x in m.named_modules()
               if isinstance(x, torch.nn.Linear) and name.rsplit(".", 1)[-1] in TARGETS)


def plan(cfg, gpus, gen_batch, micro_batch, *, prompt=PROMPT, response=RESPONSE, mfu=MFU, peak=PEAK, bw=BANDWIDTH,
         lora_r=0):
    """Memory (bytes per GPU) and time (s) of one step on `gpus` GPUs with FSDP2 (lora_r > 0: with
    LoRA adapters of that rank on one GPU; the time is full fine-tuning's)."""
    if lora_r and gpus > 1:
        raise ValueError("LoRA runs in one process (train.py refuses --lora-r under torchrun)")
    n, f, bwd_ratio = measure(cfg, prompt + response)
    h, layers = cfg.hidden_size, cfg.num_hidden_layers
    kv_dim = cfg.num_key_value_heads * (h // cfg.num_attention_heads)
    kv = kv_bytes(cfg)                                                                # KV bytes per token
    seq = prompt + response
    tokens = PROMPTS * prompt + ROLLOUTS * response                                   # T: each prompt once per group
    flops = {"sampling": f * tokens, "log-probs": 2 * f * tokens, "update": (2 + bwd_ratio) * f * tokens}
    train_s = (flops["log-probs"] + flops["update"]) / gpus / (mfu * peak)
    decode_steps = ROLLOUTS / gpus / gen_batch * response
    weights = n * BF16
    prompts = -(-gen_batch // GROUP)  # a batch's prompts, each one's keys and values held once (lib/sampling/prefix_attention.py)
    read = weights + (prompts * prompt + gen_batch * response / 2) * kv              # bytes per decode step
    sample_s = decode_steps * read / bw
    states = n * BASE_BYTES + adapter_params(cfg, lora_r) * ADAPTER_BYTES if lora_r else n * STATE_BYTES / gpus
    if not lora_r and gpus == 1:
        states += REF_EMBED_BYTES * cfg.vocab_size * h
    gathered = weights  # the bf16 policy sampling reads: FSDP2's gathered copy, or one process's cast (`casts`)
    layer_acts = BF16 * (6 * h + 2 * kv_dim + 4 * cfg.intermediate_size)              # one layer, per token
    acts = micro_batch * seq * (layers * BF16 * h + layer_acts) + LOGIT_CHUNK * cfg.vocab_size * 4
    sampling, training = states + gathered + (prompts * prompt + gen_batch * response) * kv, states + acts
    return {"params": n, "fwd_flop_per_token": f, "bwd_over_fwd": bwd_ratio, "tokens": tokens, "flops": flops,
            "states": states, "sampling_peak": sampling, "training_peak": training, "peak": max(sampling, training),
            "kv_per_token": kv, "kv_all_rollouts": ROLLOUTS * seq * kv,
            "sample_s": sample_s, "train_s": train_s, "step_s": sample_s + train_s,
            "epoch_h": (sample_s + train_s) * STEPS_PER_EPOCH / 3600}


def card(peak):
    """The smallest of CARDS (GB) that holds `peak` bytes and leaves FREE of it, or None."""
    return next((c for c in CARDS if peak <= c * 1e9 * (1 - FREE)), None)


SETTINGS = [  # (label, gpus, --gen-batch, --micro-batch, LoRA rank) printed by --cards
    ("full fine-tuning", 1, 32, 8, 0), ("full fine-tuning", 1, 16, 1, 0), ("full fine-tuning, FSDP2", 8, 64, 8, 0),
    ("LoRA r 8", 1, 16, 2, 8), ("LoRA r 8", 1, 4, 1, 8), ("LoRA r 64", 1, 4, 1, 64)]


def cards(model):
    """Peak memory per GPU of each of SETTINGS and the smallest card it fits."""
    cfg = config(model)
    print(f"{model}: peak memory per GPU (the larger of sampling and training) and the smallest of "
          f"{', '.join(f'{c} GB' for c in CARDS)} that holds it")
    print(f"  {'setting':<26}{'GPUs':>5}{'--gen-batch':>12}{'--micro-batch':>14}{'states':>9}{'sampling':>10}"
          f"{'training':>10}  card")
    for label, gpus, gb, mb, r in SETTINGS:
        x = plan(cfg, gpus, gb, mb, lora_r=r)
        c = card(x["peak"])
        print(f"  {label:<26}{gpus:>5}{gb:>12}{mb:>14}{x['states'] / 1e9:>8.1f}G{x['sampling_peak'] / 1e9:>9.1f}G"
              f"{x['training_peak'] / 1e9:>9.1f}G  {f'{c} GB' if c else 'none'}")


def kv_bytes(cfg, key=BF16):
    """KV cache bytes per token, values in bf16 and keys in `key` bytes. Under FSDP2 the model computes
    in bf16; in one process under autocast the rotated keys come out float32 (float32 embeddings, so
    float32 rotary tables): the cached and compiled samplers store them cast to bf16, as attention
    reads them (lib/sampling/sampler.py), `--sampler generate`'s DynamicCache keeps them float32 (key=4)."""
    kv_dim = cfg.num_key_value_heads * (cfg.hidden_size // cfg.num_attention_heads)
    return cfg.num_hidden_layers * kv_dim * (key + BF16)


def casts(cfg, gpus, gen_batch, micro_batch, response=RESPONSE, bw=BANDWIDTH):
    """The casts of one step's weights to bf16, per GPU: the bytes of the cast copy sampling
    holds, and seconds of their traffic (CAST bytes a weight) at `bw`. One process casts each
    matmul weight (every nn.Linear's: what autocast casts) once for sampling and the old log-probs
    (lib.training.precision.cast_once), then at every forward of the update (a micro-batch's forward and its
    checkpointed recompute); FSDP2 casts every parameter's shard before each all-gather: once to
    sample, once per no-grad log-prob pass, twice per micro-batch (forward, backward).
    `per_token_s`: sampling's casts when every decode step cast every weight (before cast_once)."""
    with torch.device("meta"):
        m = Qwen2ForCausalLM(cfg)
    n = sum(p.numel() for p in m.parameters())
    if gpus == 1:
        n = sum(p.numel() for x in m.modules() if isinstance(x, torch.nn.Linear) for p in x.parameters(recurse=False))
    cast = CAST * n / gpus / bw                                                       # s, one cast of this GPU's part
    rows = ROLLOUTS / gpus
    return {"copy": BF16 * n, "sample_s": cast,
            "logprob_s": 0.0 if gpus == 1 else rows / NO_GRAD_ROWS * cast,
            "update_s": 2 * rows / micro_batch * cast,
            "per_token_s": rows / gen_batch * response * cast if gpus == 1 else 0.0}


def endpoint_s(gpus, sim_s=SIM_S, judge_s=JUDGE_S, calls=CALLS):
    """Seconds a step waits for the frozen LLMs, on each rank: its rollouts' `calls` simulator
    requests each at `sim_s`, SIM_WORKERS at a time, and one judge rating each at `judge_s`,
    JUDGE_WORKERS at a time. Neither overlaps the GPU work (a turn's tool answers come before the
    next turn is sampled, the ratings after the rollouts); perfect packing, so a lower bound."""
    rows = ROLLOUTS / gpus
    return {"sim_s": rows * calls * sim_s / SIM_WORKERS, "judge_s": rows * judge_s / JUDGE_WORKERS}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=sorted(SHAPES), default="3B")
    p.add_argument("--gpus", type=int, nargs="+", default=[1, 8])
    p.add_argument("--gen-batch", type=int, nargs="+", default=[GEN_BATCH, 64],
                   help="rows sampled together, one per --gpus")
    p.add_argument("--micro-batch", type=int, default=8, help="rollouts per forward/backward")
    p.add_argument("--mfu", type=float, default=MFU)
    p.add_argument("--cards", action="store_true", help="memory per GPU with and without LoRA against CARDS instead")
    p.add_argument("--sim-s", type=float, default=SIM_S, help="seconds per simulator request (assumed)")
    p.add_argument("--judge-s", type=float, default=JUDGE_S, help="seconds per judge rating (assumed)")
    p.add_argument("--calls", type=float, default=CALLS, help="simulator requests per rollout (assumed)")
    a = p.parse_args(argv)
    if a.cards:
        return cards(a.model)
    cfg = config(a.model)
    for gpus, gb in zip(a.gpus, a.gen_batch):
        r = plan(cfg, gpus, gb, a.micro_batch, mfu=a.mfu)
        print(f"{a.model} on {gpus} GPU(s), --gen-batch {gb}, --micro-batch {a.micro_batch}:")
        print(f"  params {r['params']:,}; forward {r['fwd_flop_per_token'] / 1e9:.2f} GFLOP/token at "
              f"{PROMPT + RESPONSE:,} positions; backward {r['bwd_over_fwd']:.2f}x forward")
        print(f"  step: {r['tokens']:,} tokens per pass; " +
              ", ".join(f"{k} {v / 1e15:,.0f} PFLOP" for k, v in r["flops"].items()))
        print(f"  memory per GPU: states {r['states'] / 1e9:.1f} GB, sampling peak {r['sampling_peak'] / 1e9:.1f} GB, "
              f"training peak {r['training_peak'] / 1e9:.1f} GB; KV {r['kv_per_token']:,} B/token, "
              f"all {ROLLOUTS} rollouts at once {r['kv_all_rollouts'] / 1e9:,.0f} GB")
        print(f"  time: sampling {r['sample_s'] / 60:.1f} min (bandwidth bound), log-probs + update "
              f"{r['train_s'] / 60:.1f} min at MFU {a.mfu:.0%}; step {r['step_s'] / 60:.1f} min, "
              f"epoch ({STEPS_PER_EPOCH} steps) {r['epoch_h']:.0f} h")
        print_extras(cfg, gpus, gb, a, r["step_s"])


def print_extras(cfg, gpus, gen_batch, a, step_s):
    """The lines for `casts` and `endpoint_s`, and the step with them (`step_s`: the passes alone)."""
    c, e = casts(cfg, gpus, gen_batch, a.micro_batch), endpoint_s(gpus, a.sim_s, a.judge_s, a.calls)
    cast_s, wait_s = c["sample_s"] + c["logprob_s"] + c["update_s"], e["sim_s"] + e["judge_s"]
    print(f"  casts to bf16: copy held while sampling {c['copy'] / 1e9:.1f} GB (in the sampling peak); traffic "
          f"{cast_s:.1f} s a step (sampling {c['sample_s']:.2f} s, log-probs {c['logprob_s']:.1f} s, update "
          f"{c['update_s']:.1f} s)" + (f"; at every decode step instead: {c['per_token_s'] / 60:.1f} min"
                                      if c["per_token_s"] else ""))
    print(f"  frozen LLMs (assumed {a.sim_s:g} s a simulator request x {a.calls:g} a rollout, {a.judge_s:g} s a "
          f"rating): simulator {e['sim_s'] / 60:.1f} min, judge {e['judge_s'] / 60:.1f} min; step with casts and "
          f"frozen LLMs {(step_s + cast_s + wait_s) / 60:.1f} min, "
          f"epoch {(step_s + cast_s + wait_s) * STEPS_PER_EPOCH / 3600:.0f} h")


if __name__ == "__main__":
    main()
