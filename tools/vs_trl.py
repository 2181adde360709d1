"""Cost of one RL step: this project's train.rl_step against TRL's GRPOTrainer and a raw floor.

    pip install -r requirements-bench.txt        # trl==1.16.0; torch 2.13 and transformers 5.24 stay
    python -m tools.vs_trl                          # demo + 10M models, single- and multi-turn, 3 rounds
    python -m tools.vs_trl --models 10M --rounds 5 --threads 2
    python -m tools.vs_trl --models 10M --systems project floor --dtype bfloat16   # the 10M step in bf16

Identical work for all three: the shipped world's first --prompts RL prompts x G = 8 rollouts,
sampled at temperature 1 on --threads CPU threads, scored, then ONE optimizer step (AdamW, lr
1e-4) over all 64 rollouts in micro-batches of 8, with a frozen reference model and KL β = 0.001
(the project's default; TRL's `beta`).

- project: train.rl_step (rollout.py's KV-cached sampler with each prompt prefilled once;
  sampling-time old log-probs; reference and PPO passes with each prompt computed once per
  group), --mini-batch 8 (one update), --micro-batch 8.
- TRL: GRPOTrainer.train() for one step (max_steps 1), 8 rows x 8 accumulation steps, its own
  transformers `generate` path (no vLLM on a CPU) and, multi-turn, its tool loop (`tools=[f]`).
- trl-ckpt (opt-in, --systems ... trl-ckpt): TRL as it ships, gradient checkpointing on; the
  rows above turn it off in TRL, as the project runs at these sizes.
- floor: one `model.generate` of all 64 rows (left-padded, exactly as many new tokens per row as
  the project's rollouts had on average in that round), one forward/backward over them (full
  logits, plain log_softmax) and one AdamW step: what any implementation must at least do.

Workloads. single-turn: one reply of exactly --tokens new ids (the stop ids are masked off, so
every row runs the full length in every system). multi-turn: up to --turns turns within a budget
of --turns x --tokens ids; the model calls the tool f, whose answer (OBS) both systems append
through the chat template, and the next turn follows. Models are random Qwen2s (tiny.build_model)
on the world's tokenizer: "demo" = the demo's shape (hidden 128, 2 layers), "10M" = hidden 256,
12 layers. As in tools/speed.py, a fixed bias on the next id given the current id makes them
behave: eos and <tool_call> get likelier (a turn of ~70 ids on average); <tool_call> is followed
by CALL (one added token, the text of a valid call of f), then </tool_call>, then eos (TRL stops a
turn at eos only, the project at </tool_call>). Both systems render the prompt the same way (the
world's system prompt, with its tool block, plus f's schema, as TRL's tool path does); the project
gets a fixed simulator that answers every call with OBS.

Each (system, model, workload) step runs in a fresh child process (peak memory is the child's
ru_maxrss; `+step` is its growth during the step), systems interleaved round by round; the table
shows medians over rounds, and where each step's time goes: sampling (TRL: its generate and tool
loop), the no-grad passes (reference; TRL: reference and old log-probs), and the rest (the
training forward/backward, optimizer step, scoring, collation).

The FLOP floor. Each child also counts the matrix-multiply FLOPs of the passes its system ran
(`forward_flops`: the linear layers, QK^T and AV over each token's actual context, the LM head
on the positions it ran on; padding not counted; a backward is 2x its forward) and, before its
step, times the model's own nn.Linear layers on RATE_TOKENS rows in the compute dtype on the
same threads (`matmul_rate`, median of RATE_REPEATS). Per phase, floor s = FLOPs / that rate
and "x floor" = measured / floor: how far a phase is from matmul-bound at the rate this machine
reached then. What each system's passes are: project, each group's prompt once in sampling
(prefilled once) and in every log-prob pass (lib.training.logprobs' share plan), the head on response
positions only; TRL, every row whole in every pass (prompt included), a tool turn regenerating
from the whole conversation, the head on the completion; floor, every row whole, the training
pass's head on every position. The rest's floor holds the training forward and backward only.

--dtype bfloat16 runs every system's passes in bf16 on float32 weights (the project and the
floor under lib.training.precision.autocast, TRL with bf16=True and under it too); the project then
recomputes its old log-probs, as train.py does by default below float32 (its --old-logprobs).
"""
import argparse
import copy
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import torch
from transformers import Qwen2ForCausalLM

import rollout
from lib.inputs import chat
from lib.inputs.data import load_sft, load_tasks
from lib.training import tiny
from lib.training.logprobs import share_plan
from lib.training.precision import autocast
from segment import Call

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SHAPES = {"demo": (128, 2, 4), "10M": (256, 12, 8)}  # hidden, layers, heads (the demo's: train.py --tiny-size)
SYSTEMS = ("project", "trl", "floor", "trl-ckpt")  # trl-ckpt: TRL with its default gradient checkpointing
DTYPES = ("float32", "bfloat16")  # --dtype: the compute dtype of every pass (the weights stay float32)
EOS_BIAS, CALL_BIAS, FORCE = 2.5, 2.8, 30.0  # as tools/speed.py; FORCE makes a transition certain
CALL = '\n{"name": "f", "arguments": {}}\n'   # one added token: a valid call of f
OBS = '{"value": 42, "unit": "kg", "source": "registry", "note": "the answer of f, as recorded"}'
RATE_TOKENS = 1024  # rows of the timed matmuls: the order of a training micro-batch's tokens (8 x ~130-600)
RATE_REPEATS = 5    # timed passes over the model's linear layers (after one warm-up); the median is taken
BACKWARD = 2        # a backward pass costs 2x its forward's FLOPs (the input and the weight gradients)


def f() -> str:
    """Look up the recorded value.
    """
    return OBS


def rss_mb():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class Caller(Qwen2ForCausalLM):
    """A random Qwen2 plus `bias[current id]` on its next-id logits (the same with or without a KV cache)."""

    def forward(self, input_ids=None, **kw):
        out = super().forward(input_ids=input_ids, **kw)
        out.logits = out.logits + self.bias[input_ids[:, -out.logits.shape[1]:]].to(out.logits.dtype)
        return out


def setup(shape, workload):
    world = load_tasks(os.path.join(ROOT, "data/world/rl.jsonl"))
    tok = tiny.build_tokenizer(tiny.world_texts(world, load_sft(os.path.join(ROOT, "data/world/sft.jsonl"))))
    tok.add_tokens([CALL])
    base = tiny.build_model(tok, 0, *SHAPES[shape])
    model = Caller(base.config)
    model.load_state_dict(base.state_dict())
    V = model.config.vocab_size
    ids = {k: tok.convert_tokens_to_ids(k) for k in ("<tool_call>", "</tool_call>", CALL)}
    bias = torch.zeros(V, V)                                                    # (V, V)
    if workload == "single-turn":  # no stop id, no call: every row samples the full length
        for i in (tok.eos_token_id, tok.pad_token_id, ids["<tool_call>"], ids["</tool_call>"], ids[CALL]):
            bias[:, i] = -FORCE
    else:
        bias[:, tok.eos_token_id] = EOS_BIAS
        bias[:, ids["<tool_call>"]] = CALL_BIAS
        bias[ids["<tool_call>"], ids[CALL]] = FORCE
        bias[ids[CALL], ids["</tool_call>"]] = FORCE
        bias[ids["</tool_call>"], tok.eos_token_id] = FORCE
    model.register_buffer("bias", bias, persistent=False)
    return world, tok, model


class FixedSim:
    """The project's simulator for this benchmark: every turn with a call gets OBS."""

    def respond(self, texts, tasks):
        return [([Call(name="f")], [OBS]) if "<tool_call>" in t else ([], []) for t in texts]


def timed(fn, bucket, key, when=lambda: True):
    def wrapper(*args, **kw):
        if not when():
            return fn(*args, **kw)
        t0 = time.perf_counter()
        try:
            return fn(*args, **kw)
        finally:
            bucket[key] = bucket.get(key, 0.0) + time.perf_counter() - t0
    return wrapper


def noted(fn, note):
    """fn, calling note(its result, *its args, **its kwargs) after each call (what FLOPs are counted from)."""
    def wrapper(*args, **kw):
        out = fn(*args, **kw)
        note(out, *args, **kw)
        return out
    return wrapper


def forward_flops(cfg, spans, head):
    """Matrix-multiply FLOPs of Qwen2 forward passes (a multiply-add is 2 FLOPs). `spans`: one
    (past, new) per row and pass: `new` tokens fed after `past` positions already computed (a
    KV cache, a shared prompt), token j of them attending to past + j + 1 positions; `head`:
    how many positions the LM head runs on. Per token and layer: 2 x the weights of the q, k,
    v, o, gate, up and down projections, plus 4 x heads x head_dim x its context (QK^T and AV);
    per head position 2 x hidden x vocab. Biases, norms, rotary and softmax are not counted."""
    h, heads, kv = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads
    d = getattr(cfg, "head_dim", None) or h // heads
    weights = h * heads * d + 2 * h * kv * d + heads * d * h + 3 * h * cfg.intermediate_size  # per layer
    tokens = sum(new for _, new in spans)
    context = sum(new * past + new * (new + 1) // 2 for past, new in spans)  # keys read, over all tokens
    return cfg.num_hidden_layers * (2 * weights * tokens + 4 * heads * d * context) + 2 * h * cfg.vocab_size * head


def matmul_rate(model, tokens=RATE_TOKENS, repeats=RATE_REPEATS):
    """FLOP/s of the model's own nn.Linear layers (the LM head included) applied to `tokens`
    random rows, in the current (autocast) dtype and thread count: the median of `repeats`
    timed passes after a warm-up one."""
    layers = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    x = {m.in_features: torch.randn(tokens, m.in_features) for m in layers}   # (tokens, in)
    flops = sum(2 * tokens * m.in_features * m.out_features for m in layers)
    times = []
    with torch.no_grad():
        for _ in range(repeats + 1):
            t0 = time.perf_counter()
            for m in layers:
                m(x[m.in_features])
            times.append(time.perf_counter() - t0)
    return flops / statistics.median(times[1:])


def rollout_flops(cfg, rs):
    """The project's sampling (rollout.py's cached sampler): each group's prompt prefilled
    once, then every response id (sampled or tool-turn glue) at its context; the head once per
    sampled id."""
    prompts = {r.group: len(r.prompt) for r in rs}
    spans = [(0, n) for n in prompts.values()] + [(len(r.prompt), len(r.ids)) for r in rs]
    return forward_flops(cfg, spans, sum(sum(r.mask) for r in rs))


def logprob_flops(cfg, ids, attn, mask, groups=None):
    """One lib.training.logprobs.token_logprobs call: each group's shared prefix once (its share plan)
    and each row's own tokens after it, or every row whole without a plan; the head on the
    masked positions."""
    plan = share_plan(ids, attn, groups) if groups is not None else None
    if plan is None:
        spans = [(0, int(n)) for n in attn.sum(-1)]
    else:
        _, n, _, g, P = plan
        spans = [(0, int(p)) for p in P] + [(int(P[k]), int(m - P[k])) for m, k in zip(n, g)]
    return forward_flops(cfg, spans, int(mask[:, 1:].sum()))


def generate_flops(cfg, prompts, completions):
    """`model.generate` of each prompt (ids) alone, whole, then its completion's ids at their
    context (a finished row's padding not counted); the head once per completion id."""
    spans = [(0, len(p) + len(c)) for p, c in zip(prompts, completions)]
    return forward_flops(cfg, spans, sum(map(len, completions)))


def run_project(world, tok, model, a, turns, budget):
    import rewards
    import train
    from transformers.utils import get_json_schema
    schema = get_json_schema(f)
    rollout.prompt_ids = lambda tok, task: chat.chat_ids(tok, task.messages, [schema])  # TRL's rendering
    args = train.get_args(["--data", os.path.join(ROOT, "data/world/rl.jsonl"), "--group-size", str(a.group_size),
                           "--prompts-per-step", str(a.prompts), "--mini-batch", str(a.prompts),
                           "--micro-batch", "8", "--max-tokens", str(budget), "--max-turns", str(turns),
                           "--max-tool-rounds", "0", "--gen-batch", str(a.prompts * a.group_size),
                           "--lr", "1e-4", "--device", "cpu", "--malformed", "answer", "--dtype", a.dtype])
    ref = copy.deepcopy(model).to(getattr(torch, a.dtype)).eval().requires_grad_(False)  # as train.py: compute dtype
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    phases, calls = {}, []  # calls: (grad enabled, ids, attn, mask, groups) of every log-prob pass
    note = lambda out, model, ids, attn, mask, groups=None, **kw: calls.append(  # noqa: E731
        (torch.is_grad_enabled(), ids, attn, mask, groups))
    train.rollout = timed(train.rollout, phases, "sample")
    train.token_logprobs = timed(noted(train.token_logprobs, note), phases, "no-grad", lambda: not torch.is_grad_enabled())
    before = rss_mb()
    t0 = time.perf_counter()
    with autocast(a.dtype, "cpu"):
        m, rs, *_ = train.rl_step(model, ref, tok, opt, world[:a.prompts], list(range(a.prompts)),
                                  frozen=(FixedSim(), rewards.FactsJudge()), s=train.Settings.of(args), step=0,
                                  bad=0)
    total = time.perf_counter() - t0
    cfg = model.config
    flops = {"sample": rollout_flops(cfg, rs),
             "no-grad": sum(logprob_flops(cfg, *c[1:]) for c in calls if not c[0]),
             "rest": (1 + BACKWARD) * sum(logprob_flops(cfg, *c[1:]) for c in calls if c[0])}
    tokens = sum(len(r.ids) for r in rs) / len(rs)
    return total, phases, flops, before, tokens, sum(r.tool_turns for r in rs) / len(rs)


def run_trl(world, tok, model, a, turns, budget):
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen3_template
    tok.response_template = qwen3_template  # the Hermes <tool_call> parser; our template is Qwen2.5's
    path = os.path.join(a.tmp, f"ref-{os.getpid()}")  # TRL loads its reference model from a folder
    model.save_pretrained(path)
    with open(os.path.join(path, "config.json")) as fh:  # TRL 1.16 reads config.auto_map, which transformers
        cfg_json = json.load(fh)                          # 5.24 sets only when the file has one
    with open(os.path.join(path, "config.json"), "w") as fh:
        json.dump({**cfg_json, "auto_map": {}}, fh)
    model.config._name_or_path = path
    data = Dataset.from_list([{"prompt": t.messages} for t in world[:a.prompts]])
    cfg = GRPOConfig(output_dir=os.path.join(a.tmp, "trl"), per_device_train_batch_size=8,
                     gradient_accumulation_steps=a.prompts * a.group_size // 8, num_generations=a.group_size,
                     max_completion_length=budget, max_steps=1, learning_rate=1e-4, beta=0.001,
                     temperature=1.0, top_p=1.0, top_k=0, use_cpu=True, report_to=[], save_strategy="no",
                     logging_steps=1, bf16=a.dtype == "bfloat16", shuffle_dataset=False, disable_tqdm=True, seed=0,
                     gradient_checkpointing=a.system == "trl-ckpt",  # off as the project at these sizes; TRL's default is on
                     max_tool_calling_iterations=turns - 1 if turns > 1 else None, dataloader_num_workers=0)
    trainer = GRPOTrainer(model=model, reward_funcs=lambda completions, **kw: [float(len(str(c))) for c in completions],
                          args=cfg, train_dataset=data, processing_class=tok, tools=[f] if turns > 1 else None)
    phases, clock, seen, gens, passes = {}, {}, {}, [], []  # gens: (prompts, completions) of each generate call
    trainer._generate = timed(trainer._generate, phases, "sample")
    trainer._generate_single_turn = noted(trainer._generate_single_turn,
                                          lambda out, prompt_ids, *args, **kw: gens.append((prompt_ids, out[0])))
    note = lambda out, model, input_ids, attention_mask, logits_to_keep, *args, **kw: passes.append(  # noqa: E731
        (torch.is_grad_enabled(), attention_mask, logits_to_keep))
    trainer._get_per_token_logps_and_entropies = timed(noted(trainer._get_per_token_logps_and_entropies, note),
                                                       phases, "no-grad", lambda: not torch.is_grad_enabled())
    real = trainer._generate_and_score_completions

    def spy(*args, **kw):
        out = real(*args, **kw)
        seen.setdefault("tokens", []).append(float(out["completion_mask"].sum(1).float().mean()))
        return out
    trainer._generate_and_score_completions = spy

    class Clock(TrainerCallback):
        def on_step_begin(self, *args, **kw):
            clock["before"], clock["t0"] = rss_mb(), time.perf_counter()

        def on_step_end(self, *args, **kw):
            clock["total"] = time.perf_counter() - clock["t0"]
    trainer.add_callback(Clock())
    with autocast(a.dtype, "cpu"):  # its generate too, whatever bf16=True covers: the same work as the others
        trainer.train()
    cfg = model.config
    whole = lambda attn, keep: forward_flops(cfg, [(0, int(n)) for n in attn.sum(-1)],  # noqa: E731
                                             int(attn[:, -keep:].sum()))  # every row whole, the head on the completion
    flops = {"sample": sum(generate_flops(cfg, p, c) for p, c in gens),
             "no-grad": sum(whole(attn, keep) for grad, attn, keep in passes if not grad),
             "rest": (1 + BACKWARD) * sum(whole(attn, keep) for grad, attn, keep in passes if grad)}
    tokens = statistics.mean(seen.get("tokens", [0.0]))
    calls = trainer.state.log_history[0].get("tools/call_frequency", 0.0)  # calls per rollout
    return clock["total"], phases, flops, clock["before"], tokens, float(calls)


def run_floor(world, tok, model, a, *, turns, budget, n_new):
    from transformers.utils import get_json_schema
    schema = get_json_schema(f)
    prompts = [chat.chat_ids(tok, t.messages, [schema]) for t in world[:a.prompts] for _ in range(a.group_size)]
    P = max(map(len, prompts))
    ids = torch.tensor([[tok.pad_token_id] * (P - len(p)) + p for p in prompts])   # (B, P) left-padded
    attn = (torch.arange(P)[None] >= torch.tensor([P - len(p) for p in prompts])[:, None]).long()
    model.generation_config.pad_token_id = tok.pad_token_id
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    phases, before = {}, rss_mb()
    t0 = time.perf_counter()
    model.eval()
    with torch.no_grad(), autocast(a.dtype, "cpu"):
        out = model.generate(input_ids=ids, attention_mask=attn, max_new_tokens=n_new, min_new_tokens=n_new,
                             do_sample=True, temperature=1.0, top_k=0, top_p=1.0, eos_token_id=None)
    phases["sample"] = time.perf_counter() - t0
    model.train()
    full = torch.cat([attn, torch.ones(len(ids), out.shape[1] - P, dtype=torch.long)], 1)
    pos = (full.cumsum(-1) - 1).clamp(min=0)
    for s in range(0, len(out), 8):
        x, m = out[s:s + 8], full[s:s + 8]
        with autocast(a.dtype, "cpu"):
            logits = model(input_ids=x, attention_mask=m, position_ids=pos[s:s + 8]).logits
        logp = logits[:, P - 1:-1].float().log_softmax(-1)
        (-logp.gather(-1, x[:, P:, None]).mean() / (len(out) // 8)).backward()
    opt.step()
    total = time.perf_counter() - t0
    cfg, n = model.config, [len(p) + n_new for p in prompts]
    flops = {"sample": generate_flops(cfg, prompts, [[0] * n_new] * len(prompts)), "no-grad": 0,
             "rest": (1 + BACKWARD) * forward_flops(cfg, [(0, k) for k in n], sum(n))}  # full logits: every position
    return total, phases, flops, before, float(n_new), 0.0


def child(a):
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    world, tok, model = setup(a.model, a.workload)
    params = sum(p.numel() for p in model.parameters()) / 1e6
    with autocast(a.dtype, "cpu"):
        rate = matmul_rate(model)
    turns = 1 if a.workload == "single-turn" else a.turns
    budget = a.tokens * turns
    if a.system == "project":
        total, phases, flops, before, tokens, calls = run_project(world, tok, model, a, turns, budget)
    elif a.system in ("trl", "trl-ckpt"):
        total, phases, flops, before, tokens, calls = run_trl(world, tok, model, a, turns, budget)
    else:
        total, phases, flops, before, tokens, calls = run_floor(world, tok, model, a, turns=turns, budget=budget, n_new=a.floor_tokens)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps({"total": total, "phases": phases, "flops": flops, "rate": rate, "peak_mb": peak,
                                  "step_mb": peak - before, "tokens": tokens, "calls": calls,
                                  "params": params}), flush=True)


PHASES = ("sample", "no-grad", "rest")  # the table's phases, as the children time them (rest: the step's remainder)


def floor_cells(times, flops, rate):
    """The table's floor columns for one system: the matmul rate (GFLOP/s), each phase's GFLOP,
    the step's floor time (its FLOPs at `rate`), and measured / floor per phase and for the
    step ("-" for a phase with no FLOPs). times, flops: per phase (PHASES); rate: FLOP/s."""
    ratio = lambda t, n: f"{t / (n / rate):.2f}x" if n else "-"  # noqa: E731
    total = sum(flops.values())
    return ([f"{rate / 1e9:.1f}"] + [f"{flops[k] / 1e9:.1f}" for k in PHASES] + [f"{total / rate:.2f}"]
            + [ratio(times[k], flops[k]) for k in PHASES] + [ratio(sum(times.values()), total)])


def rounds(a, shape, wl):
    """--rounds steps of every system on (model shape, workload), each in a fresh child process,
    interleaved round by round; the floor's rows get as many new ids as the project's had. Returns
    {system: [the child's result per round]}."""
    res = {s: [] for s in a.systems}
    for rnd in range(a.rounds):
        n_new = a.tokens
        for s in a.systems:  # interleaved: project, trl, floor, project, ...
            cmd = [sys.executable, "-m", "tools.vs_trl", "--child", s, shape, wl, "--seed", str(rnd),
                   "--floor-tokens", str(n_new), "--threads", str(a.threads), "--prompts", str(a.prompts),
                   "--group-size", str(a.group_size), "--tokens", str(a.tokens), "--turns", str(a.turns),
                   "--dtype", a.dtype, "--tmp", a.tmp]
            env = {**os.environ, "OMP_NUM_THREADS": str(a.threads), "TOKENIZERS_PARALLELISM": "false"}
            out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
            line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
            if out.returncode or not line:
                sys.exit(f"{s} {shape} {wl} failed:\n{out.stdout[-3000:]}\n{out.stderr[-5000:]}")
            r = json.loads(line[0][7:])
            res[s].append(r)
            if s == "project":
                n_new = max(1, round(r["tokens"]))
            print(f"round {rnd} {shape} {wl} {s}: {r['total']:.1f}s "
                  f"{ {k: round(v, 1) for k, v in r['phases'].items()} } peak {r['peak_mb']:.0f} MB "
                  f"tok/row {r['tokens']:.0f} calls/row {r['calls']:.2f}", flush=True)
    return res


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    p.add_argument("--workloads", nargs="+", default=["single-turn", "multi-turn"], choices=["single-turn", "multi-turn"])
    p.add_argument("--systems", nargs="+", default=list(SYSTEMS[:3]), choices=SYSTEMS)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--tokens", type=int, default=256, help="new ids per turn (single-turn: exactly this many)")
    p.add_argument("--turns", type=int, default=4, help="turn cap of the multi-turn workload")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--dtype", choices=DTYPES, default=DTYPES[0], help="compute dtype of every system's passes")
    p.add_argument("--tmp", default="/tmp/slca-bench-trl")
    p.add_argument("--child", nargs=3, metavar=("SYSTEM", "MODEL", "WORKLOAD"), help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--floor-tokens", type=int, default=256, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        a.system, a.model, a.workload = a.child
        return child(a)
    load = os.getloadavg()
    rows = []
    for shape in a.models:
        for wl in a.workloads:
            res = rounds(a, shape, wl)
            med = {s: {k: statistics.median(x[k] for x in res[s]) for k in ("total", "peak_mb", "step_mb", "tokens")}
                   for s in a.systems}
            for s in a.systems:
                ph = {k: statistics.median(x["phases"].get(k, 0.0) for x in res[s]) for k in PHASES[:2]}
                ph["rest"] = med[s]["total"] - sum(ph.values())
                ratio = f"{med[s]['total'] / med['trl']['total']:.2f}x" if "trl" in med else "-"  # no TRL row: no ratio
                flops = {k: statistics.median(x["flops"][k] for x in res[s]) for k in PHASES}
                rows.append((shape, f"{res[s][0]['params']:.1f}M", wl, s, f"{med[s]['total']:.1f}", ratio,
                             *(f"{ph[k]:.1f}" for k in PHASES), f"{med[s]['peak_mb']:.0f}",
                             f"{med[s]['step_mb']:.0f}", f"{med[s]['tokens']:.0f}",
                             *floor_cells(ph, flops, statistics.median(x["rate"] for x in res[s]))))
    head = ("model", "params", "workload", "system", "step s", "vs TRL", "sampling s", "no-grad s", "rest s",
            "peak MB", "+step MB", "tok/row", "GFLOP/s", "sampling GFLOP", "no-grad GFLOP", "rest GFLOP",
            "floor s", "sampling x floor", "no-grad x floor", "rest x floor", "step x floor")
    print(f"\n{a.prompts} prompts x G={a.group_size}, {a.tokens} new ids per turn (multi-turn: up to {a.turns} turns), "
          f"{a.dtype}, {a.threads} threads, medians of {a.rounds} interleaved rounds; load average at start "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, at end {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" for _ in head) + "|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
