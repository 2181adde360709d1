"""lib.sampling.sampler.sample against a reference without a KV cache: rows that stop at different steps
(live rows moving into the slots of stopped ones, the cache grown past its preallocated
columns), then a second turn from the returned per-row caches; each decoding step through the
model's forward (`--sampler cached`) and through lib/sampling/compiled.py's step, uncompiled (`--sampler
compiled` runs it compiled: tests/test_compiled.py)."""
import pytest
import torch

from helpers import tiny_model, tokenizer
from lib.sampling import compiled, sampler
from lib.sampling.sampler import sample
from rollout import stop_ids


def reference(model, seqs, budgets, temperature, stops):
    """One turn per row by full forwards over each whole sequence (no cache, no padding). The live
    rows are sampled together, in row order, as `sample` promises: (ids, logprobs) per row."""
    new, lps = [[] for _ in seqs], [[] for _ in seqs]
    live = [b for b in range(len(seqs)) if budgets[b] >= 1]
    while live:
        logits = torch.stack([model(input_ids=torch.tensor([seqs[b] + new[b]])).logits[0, -1] for b in live])  # (b, V)
        logp = logits.float().log_softmax(-1)
        if temperature > 0:
            nxt = sampler.draw((logits.float() / temperature).softmax(-1))
        else:
            nxt = logp.argmax(-1)
        for b, t, x in zip(live, nxt.tolist(), logp.gather(-1, nxt[:, None])[:, 0].tolist()):
            new[b].append(t)
            lps[b].append(x)
        live = [b for b in live if new[b][-1] not in stops and len(new[b]) < budgets[b]]
    return new, lps


def fresh_cache(model, seq):
    """Per layer (keys, values), each (H, n, D), of a full forward over `seq`."""
    cache = model(input_ids=torch.tensor([seq]), use_cache=True).cache
    return [(layer.keys[0], layer.values[0]) for layer in cache.layers]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("room", [3, sampler.ROOM])  # 3: the cache fills and grows every few ids
@pytest.mark.parametrize("decode", [sampler.forward, compiled.decode], ids=["forward", "step"])
@pytest.mark.parametrize("share", [0, float("inf")], ids=["shared", "one-block"])  # the size rule's two ways
def test_two_turns_of_rows_stopping_at_different_steps_match_a_cacheless_reference(monkeypatch, temperature, room,
                                                                                    decode, share):
    monkeypatch.setattr(sampler, "ROOM", room)
    monkeypatch.setattr(sampler, "SHARE_BYTES", share)
    tok, model = tokenizer(), tiny_model(seed=1)
    stops = stop_ids(tok)
    prompts = [tok.encode("The weather in Paris is", add_special_tokens=False),
               tok.encode('<tool_call>\n[{"name": "f"', add_special_tokens=False)]
    seqs = [prompts[b % 2] for b in range(7)]           # rows 0, 2, 4, 6 and 1, 3, 5 share a prefill
    budgets = [2, 9, 4, 13, 1, 6, 0]                    # stopping one by one; row 6 samples nothing
    torch.manual_seed(0)
    ref, ref_lp = reference(model, seqs, budgets, temperature, stops)
    torch.manual_seed(0)
    got = sample(model, [None] * 7, seqs, budgets, temperature, stops=stops, decode=decode)
    assert [ids for ids, _, _ in got] == ref and {len(ids) for ids in ref} == {0, 1, 2, 4, 6, 9, 13}
    for (_, lp, _), want in zip(got, ref_lp):
        assert lp == pytest.approx(want, abs=1e-5)
    for b, (ids, _, kv) in enumerate(got):
        if ids:  # every id fed: the prompt and all sampled ids but the last
            for (k, v), (k0, v0) in zip(kv.columns(), fresh_cache(model, seqs[b] + ids[:-1])):
                assert torch.allclose(k, k0, atol=1e-5) and torch.allclose(v, v0, atol=1e-5)
        else:
            assert kv is None
    # turn 2 from the returned caches: each row's last id and tool-turn glue of its own length
    glue = [tok.encode(" obs" * (1 + b % 3) + "\n", add_special_tokens=False) for b in range(6)]
    seqs2 = [seqs[b] + got[b][0] + glue[b] for b in range(6)]
    budgets2 = [5, 0, 11, 3, 8, 2]                      # row 1 keeps its cache and samples nothing
    torch.manual_seed(1)
    ref2, ref2_lp = reference(model, seqs2, budgets2, temperature, stops)
    torch.manual_seed(1)
    got2 = sample(model, [kv for _, _, kv in got[:6]], [got[b][0][-1:] + glue[b] for b in range(6)],
                  budgets2, temperature, stops=stops, decode=decode)
    assert [ids for ids, _, _ in got2] == ref2
    for b, (ids, lp, kv) in enumerate(got2):
        assert lp == pytest.approx(ref2_lp[b], abs=1e-5)
        fed = seqs2[b] + ids[:-1] if ids else seqs[b] + got[b][0][:-1]  # row 1: its turn-1 cache, untouched
        for (k, v), (k0, v0) in zip(kv.columns(), fresh_cache(model, fed)):
            assert k.shape == k0.shape and torch.allclose(k, k0, atol=1e-5) and torch.allclose(v, v0, atol=1e-5)


def test_the_cache_is_written_in_place():
    """Decoding does not reallocate the cache: the batch's buffers are the same objects from
    the prefill to the end of a turn whose rows all run the full budget."""
    tok, model = tokenizer(), tiny_model()
    seen = set()
    real = sampler.Slots.update

    def spy(self, *a, **kw):
        out = real(self, *a, **kw)
        seen.add(self.k.data_ptr())
        return out
    sampler.Slots.update = spy
    try:
        seqs = [tok.encode("The weather in", add_special_tokens=False)] * 4
        got = sample(model, [None] * 4, seqs, [40] * 4, 1.0, stops=[])  # no stop ids: 40 ids per row
    finally:
        sampler.Slots.update = real
    assert [len(ids) for ids, _, _ in got] == [40] * 4
    assert len(seen) == 2  # the prefill's buffers (one row per prompt), then the batch's (one per row)


def test_draw_samples_each_row_from_its_own_probabilities():
    """The inverse-transform draw: frequencies within 5 standard errors of each row's probabilities
    (400,000 draws, seeded), an id of probability 0 never drawn (between, before and after the
    others), an unnormalised row drawn from its normalisation; a row not finite and positive refused."""
    probs = torch.tensor([[0.5, 0.0, 0.3, 0.2, 0.0],
                          [0.0, 0.0, 0.0, 0.0, 1.0],
                          [1e-9, 0.0, 0.0, 2.0, 2.0]])              # (3, 5); the last sums to 4
    torch.manual_seed(0)
    n = 400_000
    counts = torch.zeros(3, 5)
    for _ in range(n // 10_000):
        ids = sampler.draw(probs.repeat_interleave(10_000, 0)).view(3, 10_000)  # (3, 10000)
        counts += torch.nn.functional.one_hot(ids, 5).sum(1)
    want = probs / probs.sum(-1, keepdim=True)
    se = (want * (1 - want) / n).sqrt()
    assert ((counts / n - want).abs() <= 5 * se + 1e-12).all()
    assert (counts[want == 0] == 0).all()
    for bad in (float("nan"), float("inf"), 0.0):
        with pytest.raises(ValueError, match="not finite and positive"):
            sampler.draw(torch.tensor([[0.5, 0.5], [bad, 0.0 if bad == 0 else 0.5]]))


@pytest.mark.parametrize("decode", [sampler.forward, compiled.decode], ids=["forward", "step"])
def test_an_autocast_cache_holds_what_attention_reads_and_changes_no_id(monkeypatch, decode):
    """Under bf16 autocast the keys leave rotary in float32 and attention casts them to bf16 at
    every step; the cache stores them cast once instead: two turns' ids and log-probs are bit for bit
    those of a float32-key cache, at temperature 0 and 1, and the caches hold bf16. (Prefixes shared:
    in one block the rows' own columns start from the prefill's, already in the autocast dtype.)"""
    from lib.training.precision import autocast, cast_once
    monkeypatch.setattr(sampler, "SHARE_BYTES", 0)
    tok, model = tokenizer(), tiny_model(seed=1)
    seqs = [tok.encode(p, add_special_tokens=False) for p in ("The weather in Paris is", "<tool_call>\n[")] * 3
    budgets, real = [5, 9, 3, 12, 7, 6], sampler.batch_cache

    def turns(dtype_of_cache, temperature):
        sampler.batch_cache = lambda kvs, N, cap, dtype=None: real(kvs, N, cap, dtype_of_cache(dtype))
        try:
            torch.manual_seed(0)
            with cast_once(model, "bfloat16"), autocast("bfloat16", "cpu"):
                one = sample(model, [None] * 6, seqs, budgets, temperature, stops=[], decode=decode)
                glue = tok.encode(" obs\n", add_special_tokens=False)
                two = sample(model, [kv for _, _, kv in one], [ids[-1:] + glue for ids, _, _ in one], budgets,
                             temperature, stops=[], decode=decode)
        finally:
            sampler.batch_cache = real
        return [(ids, lps) for ids, lps, _ in one + two], {x.dtype for k, v in two[0][2].columns() for x in (k, v)}

    for temperature in (0.0, 1.0):
        stored, dtypes = turns(lambda dtype: dtype, temperature)
        recast, dtypes32 = turns(lambda dtype: None, temperature)
        assert stored == recast and dtypes == {torch.bfloat16} and torch.float32 in dtypes32


def test_the_size_rule_weighs_the_bytes_sharing_saves():
    """lib.sampling.sampler.pays: (rows - 1) x prefix ids x one id's keys and values a layer, in bytes,
    against the least: 3 kv heads x 64 floats in bf16 are 768 bytes an id; prefixes of 500 and 300 ids
    read by 8 and 1 rows save 7 x 500 x 768 = 2,688,000 bytes (the second saves none)."""
    keys = torch.zeros(2, 3, 500, 64, dtype=torch.bfloat16)                    # (U, H, P, D)
    prefixes = sampler.Prefixes([keys], [keys], torch.tensor([500, 300]))
    assert sampler.pays(prefixes, {0: 8, 1: 1}, 2_688_000)
    assert not sampler.pays(prefixes, {0: 8, 1: 1}, 2_688_001)
    assert not sampler.pays(prefixes, {0: 1, 1: 1}, 1)                         # groups of one: nothing saved
    empty, own = sampler.unshared(prefixes)
    assert empty.n.tolist() == [0, 0] and empty.keys[0].shape == (2, 3, 0, 64)
    assert [k.shape[1] for k, _ in (own[0][0], own[1][0])] == [500, 300]
