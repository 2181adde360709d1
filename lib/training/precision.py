"""Precision: the trained weights, their gradients and AdamW's state stay float32; `autocast`
runs the forward passes in --dtype, and `cast_once` gives sampling (which changes no weight)
one cast of them instead of one per forward. `frozen_cast` stores the RL reference the way the
policy is computed; `native_bf16` and `bf16_note` tell when a CPU only emulates bf16.
"""
from contextlib import contextmanager, nullcontext

import torch

from lib.training.dist import world


def autocast(dtype, device):
    """Compute in `dtype` (a torch dtype's name) on `device` while the trained weights, their gradients and AdamW's state stay in
    float32 (a bf16 weight cannot take a 1e-6 step: its spacing near 0.02 is about 1e-4). The cast of
    each weight is not cached: torch's cache lives until the context exits, and train.py holds one
    context over many optimizer steps (all of SFT, all of an RL step's mini-batches), so a cached
    cast would run every later forward on the weights of the first one."""
    if dtype == "float32":
        return nullcontext()
    return torch.autocast(torch.device(device).type, dtype=getattr(torch, dtype), cache_enabled=False)


def native_bf16(device="cpu", cpuinfo="/proc/cpuinfo"):
    """Whether `device` computes in bf16 natively: a GPU, or a CPU whose flags hold AVX512-BF16 or
    AMX. Elsewhere torch emulates bf16 (on an AVX2-only EPYC here a (64, 576) x (576, 1536) matmul
    took 7.2x float32's time, and the smol preset's SFT step 120 s); unknown (no Linux flags) counts as native."""
    kind = torch.device(device).type
    if kind == "cuda":  # pre-Ampere cards emulate it; no card here: nothing to say
        return not torch.cuda.is_available() or torch.cuda.is_bf16_supported(including_emulation=False)
    if kind != "cpu":
        return True
    try:
        with open(cpuinfo) as f:
            flags = set(next((line for line in f if line.startswith("flags")), "").split())
    except OSError:
        return True
    return not flags or bool(flags & {"avx512_bf16", "amx_bf16"})


def auto_dtype(device=None, cpuinfo="/proc/cpuinfo"):
    """`--dtype auto`: bfloat16 where `device` (None: cuda if available, else cpu) computes it natively,
    else float32, and the line that says which and why."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if native_bf16(device, cpuinfo):
        return "bfloat16", f"dtype auto: bfloat16 ({device} computes it natively)"
    return "float32", "dtype auto: float32 (this CPU has no AVX512-BF16 or AMX flag: bfloat16 would be emulated)"


def bf16_note(dtype, device):
    """The line train.py and eval.py print when `dtype` is bf16 on a CPU that emulates it, else None."""
    if dtype == "bfloat16" and not native_bf16(device):
        return ("note: this CPU has no native bfloat16 (no AVX512-BF16 or AMX flag): torch emulates it, "
                "several times slower than --dtype float32")
    return None


@contextmanager
def cast_once(model, dtype):
    """The weights sampling reads, cast to `dtype` once for the context instead of at every
    forward (autocast's cast cache is off, see `autocast`, so each decoded token would cast every
    weight again). In one process below float32, each nn.Linear's float32 weight and bias (what
    autocast casts: the matmuls' operands) is replaced by its cast for the context's duration and
    the float32 master put back on exit: the copy is made from the weights as they are on entry and
    freed on exit, so a context must hold no optimizer step. The cast is autocast's own, so every
    output is bit for bit what autocast alone computes; embeddings and norms stay float32, as
    autocast leaves them. A tied head is cast, its embedding not. Nested, or in float32: nothing to
    cast. Under FSDP2 nothing is done: `gathered` already holds the weights in the compute dtype
    (shard's MixedPrecisionPolicy gathers them so, once for the context)."""
    kept = []                                                # (module, name, float32 master)
    try:  # a failed cast (out of memory) puts back the ones made
        if dtype != "float32" and world() == 1:
            _cast_linears(model, dtype, kept)
        yield model
    finally:
        for m, k, p in kept:
            m._parameters[k] = p


READERS = {"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"}  # children that read their module's input


@contextmanager
def cast_inputs(model):
    """Under autocast and without grad, each module whose input feeds two or more of its own projections
    (READERS: attention's q, k and v, the MLP's gate and up, as Llama and Qwen2 name them) gets that input cast to the
    compute dtype once, at its entry, instead of once per projection (autocast casts each linear's
    input again: three casts of one tensor for q, k and v). Bit for bit what autocast alone computes:
    the same cast, made once. With grad on, nothing is done: the one cast's gradient would sum its
    consumers' gradients in the compute dtype, where autocast's casts sum them in float32."""
    def one(x):  # x in the compute dtype, as each projection would cast it
        if torch.is_grad_enabled() or not torch.is_tensor(x) or x.dtype != torch.float32:
            return x
        kind = x.device.type
        return x.to(torch.get_autocast_dtype(kind)) if torch.is_autocast_enabled(kind) else x

    def hook(module, inputs, kwargs):
        if "hidden_states" in kwargs:
            return inputs, {**kwargs, "hidden_states": one(kwargs["hidden_states"])}
        return ((one(inputs[0]), *inputs[1:]), kwargs) if inputs else None
    shared = [m for m in model.modules() if len(READERS & {n for n, _ in m.named_children()}) >= 2]
    hooks = [m.register_forward_pre_hook(hook, with_kwargs=True) for m in shared]
    try:
        yield model
    finally:
        for h in hooks:
            h.remove()


def _cast_linears(model, dtype, kept, skip=()):
    """Replace each nn.Linear's float32 weight and bias (but those in `skip`) by its cast to `dtype`, one
    cast per tensor (a tied weight is cast once), appending (module, name, float32 master) to `kept`."""
    casts = {}                                               # id of a master -> its cast
    for m in [m for m in model.modules() if isinstance(m, torch.nn.Linear)]:
        for k, p in m._parameters.items():
            if p is not None and p.dtype == torch.float32 and id(p) not in skip:
                if id(p) not in casts:
                    casts[id(p)] = torch.nn.Parameter(p.detach().to(getattr(torch, dtype)), requires_grad=False)
                kept.append((m, k, p))
                m._parameters[k] = casts[id(p)]


def frozen_cast(model, dtype):
    """A frozen float32 model (the RL reference) stored the way cast_once and autocast compute the
    policy in one process: each nn.Linear's weight and bias in `dtype`, norms and embeddings float32,
    a head tied to the embeddings left to autocast's cast at each forward (no second copy). Its
    log-probs under autocast then equal the policy's bit for bit while the weights are equal (a
    reference loaded whole in bf16 rounds the norms and embeddings too: KL 6e-4 a token at RL step
    0 for SmolLM2-135M). In float32, or under FSDP2 (which gathers every parameter in `dtype` for
    policy and reference alike), `model` as it is."""
    if dtype != "float32" and world() == 1:
        embedded = {id(p) for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters()}
        _cast_linears(model, dtype, [], skip=embedded)
    return model
