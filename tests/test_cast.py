"""One cast of the weights per RL step (lib.training.precision.cast_once): train.py in bf16 on a CPU, its
casts counted as they happen (every float32 -> bf16 copy torch makes of a policy weight's storage)."""
import collections
import contextlib

import pytest
import torch
from safetensors.torch import load_file
from torch.utils._python_dispatch import TorchDispatchMode

import train
from helpers import write_world
import lib.training.precision
from lib.training.precision import native_bf16


class Casts(TorchDispatchMode):
    """Counts bf16 copies of the storages in `weights` (data pointer -> name), by phase, and the
    forward passes (embedding lookups) of each phase."""

    def __init__(self, weights, phase):
        super().__init__()
        self.weights, self.phase = weights, phase
        self.casts, self.forwards = collections.defaultdict(collections.Counter), collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        x = args[0] if args else None
        if func is torch.ops.aten._to_copy.default and kwargs.get("dtype") == torch.bfloat16 \
                and x.dtype == torch.float32 and x.untyped_storage().data_ptr() in self.weights:
            self.casts[self.phase[0]][self.weights[x.untyped_storage().data_ptr()]] += 1
        if func is torch.ops.aten.embedding.default:
            self.forwards[self.phase[0]] += 1
        return func(*args, **kwargs)


def counted_run(argv, monkeypatch):
    """train.main(argv) with each RL step's and eval's casts counted: per call, (casts before
    the update by weight, casts in the update, forwards before the update), and the names of the
    weights autocast casts (every nn.Linear's weight and bias; a tied head by its embedding's name)."""
    phase, calls, linear = ["before"], [], set()

    def counting(f):
        def run(model, *args, **kw):
            weights = {p.untyped_storage().data_ptr(): n for n, p in model.named_parameters()}
            linear.update(weights[p.untyped_storage().data_ptr()] for mod in model.modules()
                          if isinstance(mod, torch.nn.Linear) for p in mod.parameters(recurse=False))
            phase[0] = "before"
            with Casts(weights, phase) as c:
                out = f(model, *args, **kw)
            calls.append((f.__name__, c.casts["before"], sum(c.casts["update"].values()), c.forwards["before"]))
            return out
        return run

    def update(*args):
        phase[0] = "update"
        return ppo_update(*args)

    ppo_update = train.ppo_update
    monkeypatch.setattr(train, "ppo_update", update)
    monkeypatch.setattr(train, "rl_step", counting(train.rl_step))
    monkeypatch.setattr(train, "run_eval", counting(train.run_eval))
    train.main(argv)
    return calls, linear


def test_bf16_sampling_casts_each_weight_once_per_rl_step(tmp_path, monkeypatch):
    """The user's command in bf16 (toy size, 2 RL steps, evals before and after): each RL step
    casts each matmul weight once before its update (sampling and the recomputed old log-probs
    read that cast), each eval once, however many tokens they decode; the update casts as autocast
    does (at every forward). With cast_once switched off (autocast alone, as before), every
    forward casts every weight, and the run is the same bit for bit: rollouts, evals and final
    weights (so the cast is never stale: each step casts the weights its previous update left)."""
    rl, sft = write_world(tmp_path)
    argv = ["--data", rl, "--sft-data", sft, "--eval-data", rl, "--eval-limit", "2", "--sft-limit", "4",
            "--sft-epochs", "1", "--steps", "2", "--group-size", "2", "--prompts-per-step", "2", "--mini-batch", "1",
            "--max-tokens", "40", "--max-turns", "2", "--tiny-size", "32", "1", "2", "--lr", "1e-2",
            "--dtype", "bfloat16", "--show", "0"]
    runs = {}
    for how in ("once", "autocast"):
        if how == "autocast":
            monkeypatch.setattr(train, "cast_once", lambda model, dtype: contextlib.nullcontext(model))
        out = tmp_path / how
        runs[how] = counted_run(argv + ["--out", str(out)], monkeypatch)
        monkeypatch.undo()
    (once, linear), (each, _) = runs["once"], runs["autocast"]
    assert [c[0] for c in once] == ["run_eval", "rl_step", "rl_step", "run_eval"]
    for name, before, update, forwards in once:
        assert forwards > 10                                        # many decoding steps (and log-prob passes)
        assert before == dict.fromkeys(linear, 1), name             # one cast per weight, whatever was decoded
        assert (update > 0) == (name == "rl_step")                  # the update: autocast on float32 masters
    for (name, before, update, forwards), (_, _, u1, _) in zip(each, once):
        assert set(before) == linear and min(before.values()) > 10, name  # before: each forward cast each weight
        assert update == u1
    for f in ("rollouts.jsonl", "eval.jsonl"):
        assert open(tmp_path / "once" / f).read() == open(tmp_path / "autocast" / f).read()
    a, b = (load_file(tmp_path / how / "final" / "model.safetensors") for how in ("once", "autocast"))
    start = load_file(tmp_path / "once" / "sft" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], start[k]) for k in a)                      # the RL steps moved the weights


def test_cast_once_puts_the_float32_masters_back():
    """Inside: the matmul weights are bf16 casts (the tied head too), the embedding float32; on
    exit, also by an error, the very float32 parameters the optimizer holds are back."""
    from helpers import tiny_model
    from lib.training.precision import cast_once
    model = tiny_model()
    before = dict(model.named_parameters())
    with pytest.raises(RuntimeError):
        with cast_once(model, "bfloat16"):
            assert model.lm_head.weight.dtype == model.model.layers[0].mlp.up_proj.weight.dtype == torch.bfloat16
            assert model.model.embed_tokens.weight.dtype == torch.float32
            raise RuntimeError
    assert all(p is before[n] for n, p in model.named_parameters())
    assert model.lm_head.weight is model.model.embed_tokens.weight                 # tied again


def test_reference_computes_as_the_policy_in_bf16(tmp_path):
    """The RL reference (lib.training.precision.frozen_cast) gives the policy's log-probs bit for bit under
    autocast, in the update's forward and under cast_once alike, so the KL at RL step 0 is exactly 0;
    loaded whole in bf16 (the norms and embeddings rounded too), it did not. The tied head stays one
    float32 tensor, cast by autocast at each forward."""
    from helpers import tiny_model
    from lib.training.logprobs import token_logprobs
    from lib.training.model import load_policy
    from lib.training.precision import autocast, cast_once, frozen_cast
    model = tiny_model()
    model.save_pretrained(tmp_path)
    ref = frozen_cast(load_policy(str(tmp_path), "float32")[0], "bfloat16")
    assert ref.model.layers[0].mlp.up_proj.weight.dtype == torch.bfloat16 and ref.lm_head.weight.dtype == torch.float32
    assert ref.model.norm.weight.dtype == torch.float32 and ref.lm_head.weight is ref.model.embed_tokens.weight
    ids = torch.randint(0, model.config.vocab_size, (2, 12))
    x = (ids, torch.ones_like(ids), torch.ones_like(ids))
    with autocast("bfloat16", "cpu"):
        policy = token_logprobs(model, *x)                      # the update's forward: float32 masters
        with cast_once(model, "bfloat16"):
            recomputed = token_logprobs(model, *x)              # the old log-probs: one cast per step
        frozen, whole = token_logprobs(ref, *x), token_logprobs(load_policy(str(tmp_path), "bfloat16")[0], *x)
    assert torch.equal(frozen, policy) and torch.equal(frozen, recomputed)
    assert not torch.equal(whole, policy)


def test_plan_counts_the_casts_the_kv_dtype_and_the_frozen_llms():
    """tools/plan.py's `casts`, `kv_bytes` and `endpoint_s` on a small config, against counts by hand."""
    from transformers import Qwen2Config
    from tools import plan as P
    cfg = Qwen2Config(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    matmul = 3 * (64 * 64 * 2 + 64 * 32 * 2 + 3 * 64 * 128 + 64 + 32 + 32) + 64 * 1000  # q, o; k, v; mlp; biases; head
    every = matmul + 3 * 2 * 64 + 64                                                       # + the norms
    one, two = P.casts(cfg, 1, gen_batch=4, micro_batch=2, response=8, bw=1.0), P.casts(cfg, 2, 4, 2, 8, bw=1.0)
    assert one == {"copy": 2 * matmul, "sample_s": 6 * matmul, "logprob_s": 0.0,
                   "update_s": 2 * P.ROLLOUTS / 2 * 6 * matmul, "per_token_s": P.ROLLOUTS / 4 * 8 * 6 * matmul}
    assert two == {"copy": 2 * every, "sample_s": 3 * every, "logprob_s": P.ROLLOUTS / 2 / 8 * 3 * every,
                   "update_s": 2 * P.ROLLOUTS / 2 / 2 * 3 * every, "per_token_s": 0.0}
    assert P.kv_bytes(cfg) == 3 * 32 * (2 + 2) and P.kv_bytes(cfg, 4) == 3 * 32 * (4 + 2)  # bf16 keys; generate's float32
    assert P.endpoint_s(2, sim_s=2.0, judge_s=10.0, calls=3.0) == {
        "sim_s": P.ROLLOUTS / 2 * 3 * 2.0 / P.SIM_WORKERS, "judge_s": P.ROLLOUTS / 2 * 10.0 / P.JUDGE_WORKERS}


def test_one_process_bf16_kv_cache_is_bf16():
    """What plan.kv_bytes counts for one process: under autocast on float32 weights (cast once or
    not) the rotated keys come out float32 (float32 rotary tables) and the sampler's cache holds them,
    and the values, in bf16 (tests/test_rollout_sample.py: the same ids and log-probs)."""
    from helpers import tiny_model
    from lib.sampling import sampler
    from lib.training.precision import autocast, cast_once
    model = tiny_model()
    for once in (True, False):
        with torch.no_grad(), autocast("bfloat16", "cpu"), cast_once(model, "bfloat16" if once else "float32"):
            (_, _, kv), = sampler.sample(model, [None], [[1, 2, 3]], [2], 0.0, stops=[])
        for keys, values in (kv.prefixes.columns(kv.u, 0), kv.own[0]):  # the group's prompt, the row's own ids
            assert keys.dtype == values.dtype == torch.bfloat16


def test_native_bf16_reads_the_cpu_flags_and_train_py_says_when_it_is_emulated(tmp_path, monkeypatch, capsys):
    """lib.training.precision.native_bf16 from /proc/cpuinfo's flags line; train.py's one-line note (eval.py's the same) under
    --dtype bfloat16 on a CPU without them (printed before the data is read: a bad row then ends the run)."""
    info, bad = tmp_path / "cpuinfo", tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    for flags, native in [("fpu avx2 fma", False), ("avx2 avx512f avx512_bf16", True), ("avx2 amx_bf16 amx_tile", True),
                          ("avx2 avx512_bf16x", False)]:
        info.write_text(f"processor\t: 0\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: {flags}\n")
        assert native_bf16("cpu", str(info)) is native, flags
    assert native_bf16("cpu", str(tmp_path / "none")) and native_bf16("cuda", str(info))  # unknown, a GPU: no note
    for native, dtype in [(False, "bfloat16"), (True, "bfloat16"), (False, "float32")]:
        monkeypatch.setattr(lib.training.precision, "native_bf16", lambda device, n=native: n)
        with pytest.raises(SystemExit, match="bad.jsonl"):
            train.main(["--data", str(bad), "--dtype", dtype, "--out", str(tmp_path / "run")])
        said = "no native bfloat16" in capsys.readouterr().out
        assert said is (dtype == "bfloat16" and not native)


def test_dtype_auto_takes_what_the_cpu_computes_natively(tmp_path, monkeypatch, capsys):
    """--dtype auto (the smol preset's): bfloat16 on a CPU whose written flags hold AVX512-BF16, float32 on an
    AVX2-only one; the resolved dtype is the config's (old log-probs recomputed only below float32), and the
    run's first lines say which."""
    import functools
    from lib.runs import config
    from lib.training.precision import auto_dtype
    info, bad = tmp_path / "cpuinfo", tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    gguf = tmp_path / "m.gguf"  # a --model, so the preset is smol's own (never loaded: the bad row ends the run first)
    for flags, want, old in [("fpu avx2 fma", "float32", "sample"), ("avx2 avx512f avx512_bf16", "bfloat16", "recompute")]:
        info.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
        assert auto_dtype("cpu", str(info))[0] == want
        monkeypatch.setattr(config, "auto_dtype", functools.partial(auto_dtype, cpuinfo=str(info)))
        a = train.get_args(["--model", str(gguf), "--preset", "smol", "--data", str(bad), "--sft-data", "", "--eval-data", "",
                            "--device", "cpu"])
        assert (a.dtype, a.old_logprobs) == (want, old)
        assert train.get_args(["--dtype", "auto", "--data", str(bad), "--device", "cpu"]).dtype == want  # a flag over the demo's
        with pytest.raises(SystemExit, match="bad.jsonl"):
            train.main(["--dtype", "auto", "--data", str(bad), "--device", "cpu", "--out", str(tmp_path / "run")])
        assert f"dtype auto: {want} (" in capsys.readouterr().out


class Copies(TorchDispatchMode):
    """Counts float32 -> bf16 copies of activations (any tensor but `weights`' storages)."""

    def __init__(self, weights):
        super().__init__()
        self.weights, self.n = weights, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._to_copy.default and kwargs.get("dtype") == torch.bfloat16 \
                and args[0].dtype == torch.float32 and args[0].untyped_storage().data_ptr() not in self.weights:
            self.n += 1
        return func(*args, **kwargs)


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_cast_inputs_casts_a_layers_input_once_and_changes_no_number(kind):
    """Without grad, lib.training.precision.cast_inputs (which token_logprobs holds) casts attention's and
    the MLP's input once, not once per projection: 3 casts fewer a layer (q, k, v: 3 -> 1; gate, up: 2 -> 1),
    bit for bit the same log-probs; with grad on, the same casts as autocast alone and the same gradients."""
    from transformers import LlamaConfig, LlamaForCausalLM
    from helpers import tokenizer
    from lib.training import tiny
    from lib.training.logprobs import head_logprobs
    from lib.training.precision import autocast, cast_inputs
    tok, layers = tokenizer(), 3
    torch.manual_seed(0)
    model = tiny.build_model(tok, 0, 32, layers, 2) if kind == "qwen2" else LlamaForCausalLM(LlamaConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=2, tie_word_embeddings=True))
    model.eval()
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    ids = torch.randint(0, len(tok), (4, 20))
    attn, mask = torch.ones_like(ids), (torch.arange(20) >= 5).long().expand(4, 20)
    run = lambda: head_logprobs(model, ids, attn, mask, chunk=1024, plan=None, rows=None)  # noqa: E731 token_logprobs' work
    got = {}
    for grad in (False, True):
        for once in (False, True):
            model.zero_grad()
            with torch.set_grad_enabled(grad), autocast("bfloat16", "cpu"), Copies(weights) as c, \
                    (cast_inputs(model) if once else contextlib.nullcontext()):
                lp = run()
            if grad:
                lp.sum().backward()
            got[grad, once] = (lp.detach(), c.n, [p.grad.clone() for p in model.parameters()] if grad else None)
    (plain, n_plain, _), (once, n_once, _) = got[False, False], got[False, True]
    assert torch.equal(plain, once) and n_plain - n_once == 3 * layers
    (plain, n_plain, g_plain), (once, n_once, g_once) = got[True, False], got[True, True]
    assert torch.equal(plain, once) and n_plain == n_once
    assert all(torch.equal(a, b) for a, b in zip(g_plain, g_once))
