"""What the samplers keep (docs/memory.md), counted in bytes: `--sampler generate` keeps each
sampled id's log-prob, not every step's logits (its log-probs bit-identical to what
`output_logits` gives). (The paper preset's --gen-batch: tests/test_recipe.py.)"""
import pytest
import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from transformers import StoppingCriteriaList

from helpers import tiny_model, tokenizer
from lib.training import tiny
from lib.sampling import sampler
from lib.sampling.sampler import sample
from rollout import TurnEnd, generate, stop_ids


class Live(TorchDispatchMode):
    """The peak bytes of the tensors that ops allocate inside the `with` and that are alive
    together (each storage counted once, as long as any tensor holds it; weights made before are
    not counted)."""

    def __init__(self, model=None):
        super().__init__()
        self.refs, self.peak = {}, 0
        # a view of a weight (a linear layer's transpose) holds the weight's storage: not counted either
        self.old = {p.untyped_storage().data_ptr() for p in model.parameters()} if model is not None else set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.refs = {k: v for k, v in self.refs.items() if not v[0].expired()}
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in self.old:
                ref = StorageWeakRef(t.untyped_storage())
                self.refs.setdefault(ref.cdata, (ref, t.untyped_storage().nbytes()))
        self.peak = max(self.peak, sum(n for _, n in self.refs.values()))
        return out


def test_generate_keeps_log_probs_not_every_steps_logits():
    """Peak live bytes of one `generate` turn of B rows grow with its steps (the KV cache) but
    that growth does not grow with the vocabulary: keeping every step's logits would add
    B x steps x V x 4 bytes (1.8 MB between these sizes; measured 0 here)."""
    tok, B, steps, vocab = tokenizer(), 4, (8, 40), (512, 4096)
    seqs = [tok.encode("The weather in", add_special_tokens=False)] * B
    growth = {}
    for V in vocab:
        model = tiny_model()
        model.resize_token_embeddings(V, mean_resizing=False)
        peaks = []
        for T in steps:
            with Live() as live:
                out = generate(model, [None] * B, seqs, [T] * B, 1.0, stops=[], ended=None, pad_id=tok.pad_token_id)
            assert [len(ids) for ids, _, _ in out] == [T] * B  # no stop ids: every row runs T steps
            peaks.append(live.peak)
        growth[V] = peaks[1] - peaks[0]
    logits = B * (steps[1] - steps[0]) * (vocab[1] - vocab[0]) * 4  # what every step's logits would add
    assert growth[vocab[0]] > 0 and abs(growth[vocab[1]] - growth[vocab[0]]) < logits / 10, (growth, logits)


def output_logits(model, seqs, budgets, temperature, stops, pad_id):
    """What rollout.generate returned before docs/memory.md: generate's output_logits (every
    step's logits), the log_softmax gathered at the sampled ids. (ids, logprobs) per row."""
    L = max(map(len, seqs))
    ids = torch.tensor([[pad_id] * (L - len(q)) + q for q in seqs])
    attn = torch.tensor([[0] * (L - len(q)) + [1] * len(q) for q in seqs])
    end = TurnEnd(L, budgets, stops, None)
    sampling = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if temperature > 0 \
        else dict(do_sample=False)
    gen = model.generate(input_ids=ids, attention_mask=attn, max_new_tokens=max(budgets), eos_token_id=stops,
                         pad_token_id=pad_id, stopping_criteria=StoppingCriteriaList([end]), repetition_penalty=1.0,
                         output_logits=True, return_dict_in_generate=True, **sampling)
    new = gen.sequences[:, L:]
    lp = torch.stack([x.float().log_softmax(-1).gather(-1, new[:, t, None])[:, 0]
                      for t, x in enumerate(gen.logits)], 1)
    return [(row[:n or len(row)], lps[:n or len(row)]) for row, lps, n in zip(new.tolist(), lp.tolist(), end.n)]


@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
def test_generate_log_probs_equal_output_logits_bit_for_bit(temperature):
    tok, model = tokenizer(), tiny_model(seed=1)
    model.generation_config.update(top_k=2, top_p=0.5, repetition_penalty=3.0, temperature=0.3, do_sample=True)
    seqs = [tok.encode(f"The weather in {c}", add_special_tokens=False) for c in ("A", "Paris is", "B")]
    budgets, stops = [7, 12, 3], stop_ids(tok)
    torch.manual_seed(0)
    want = output_logits(model, seqs, budgets, temperature, stops, tok.pad_token_id)
    torch.manual_seed(0)
    got = generate(model, [None] * 3, seqs, budgets, temperature, stops=stops, ended=None, pad_id=tok.pad_token_id)
    assert [(ids, lps) for ids, lps, _ in got] == want  # exact floats
    assert len({len(ids) for ids, _ in want}) > 1        # rows of different lengths (padding decoded)


@pytest.mark.parametrize("budgets", [[48] * 16, list(range(33, 49))], ids=["together", "one-by-one"])
def test_cached_sampler_holds_a_turns_caches_once(monkeypatch, budgets):
    """The rows that stop are copied out of the batch cache layer by layer, each layer then
    reallocated for the live rows: the peak live bytes of a turn stay near what its rows keep
    (copied out beside a batch buffer that kept every row's slot, they were twice that). A
    group's prompt is kept once: the rows' caches share one store of the two prefixes (shared
    whatever the size rule says of this small model)."""
    monkeypatch.setattr(sampler, "SHARE_BYTES", 0)
    tok = tokenizer()
    model = tiny.build_model(tok, hidden=32, layers=8, heads=2).eval()
    prompts = [tok.encode(" ".join(["The weather in Paris is"] * 40), add_special_tokens=False)[:40 + k]
               for k in (0, 7)]
    seqs = [prompts[b % 2] for b in range(16)]                 # 2 prompts, G = 8
    with Live(model) as live:
        out = sample(model, [None] * 16, seqs, budgets, 1.0, stops=[])
    stores = {id(kv.prefixes): kv.prefixes for _, _, kv in out}.values()
    assert len(stores) == 1 and [len(p.n) for p in stores] == [2]
    kept = sum(x.nbytes for p in stores for x in p.keys + p.values) + \
        sum(k.nbytes + v.nbytes for _, _, kv in out for k, v in kv.own)
    assert [len(ids) for ids, _, _ in out] == budgets
    assert live.peak < 1.6 * kept, (live.peak, kept)  # measured 1.20 and 1.40
