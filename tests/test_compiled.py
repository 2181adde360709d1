"""lib/sampling/compiled.py compiled (`--sampler compiled`): the same ids and log-probs as `--sampler
cached` and the reference, one graph for every step (rows leaving the batch down to the last
one, the cache growing), and hooked models refused (under torchrun: at start). The step itself, uncompiled, is tested
against a cacheless reference in tests/test_rollout_sample.py. The first test compiles the
test model's step once (seconds to a minute on a CPU)."""
import pytest
import torch

from helpers import tiny_model, tokenizer
from lib.training import tiny
from lib.sampling import compiled, sampler
from lib.sampling.sampler import sample
from rollout import Episode, prompt_ids, rollout, stop_ids
from test_rollout import EchoSim, calling, world


@pytest.mark.slow  # compiles the step (~40 s on a loaded 2-core machine, seconds once cached on disk)
def test_compiled_steps_match_the_forward_in_one_graph(monkeypatch):
    """Two turns of rows stopping at different steps (7 rows down to 1, the cache full every 3
    ids), three layers: greedy ids equal, log-probs within 1e-5, and no step compiles a second graph.
    The prefixes shared (the path SmolLM2's size takes: lib.sampling.sampler.pays)."""
    monkeypatch.setattr(sampler, "ROOM", 3)
    monkeypatch.setattr(sampler, "SHARE_BYTES", 0)
    monkeypatch.setattr(torch._dynamo.config, "error_on_recompile", True)
    tok = tokenizer()
    model = tiny.build_model(tok, seed=1, hidden=32, layers=3, heads=2).eval()  # three layers: one compiled region
    stops = stop_ids(tok)
    seqs = [tok.encode(["The weather in Paris is", "<tool_call>\n"][b % 2], add_special_tokens=False) for b in range(7)]
    budgets, budgets2 = [2, 9, 4, 13, 1, 6, 0], [5, 0, 11, 3, 8, 2, 1]
    got = {}
    for name, decode in (("cached", sampler.forward), ("compiled", compiled.compiled)):
        first = sample(model, [None] * 7, seqs, budgets, 0.0, stops=stops, decode=decode)
        glue = tok.encode(" obs\n", add_special_tokens=False)
        second = sample(model, [kv for _, _, kv in first], [ids[-1:] + glue for ids, _, _ in first], budgets2,
                        0.0, stops=stops, decode=decode)
        got[name] = [(ids, lp) for ids, lp, _ in first + second]
    assert [ids for ids, _ in got["compiled"]] == [ids for ids, _ in got["cached"]]
    assert len({len(ids) for ids, _ in got["cached"]}) >= 6
    for (_, a), (_, b) in zip(got["cached"], got["compiled"]):
        assert b == pytest.approx(a, abs=1e-5)


def llama(tok, layers):
    """A random Llama (SmolLM2's architecture: no q, k, v biases) on the test tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                                        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                                        tie_word_embeddings=True)).eval()


@pytest.mark.slow  # traces the step (aot_eager, no inductor: ~15 s on a 2-core CPU)
def test_one_region_serves_every_layer_of_a_llama():
    """The step traces one decoder layer and calls it once per layer with that layer's weights
    (torch.compiler.nested_compile_region): the graph holds one layer region and L calls of it, so
    compiling SmolLM2's 30 layers traces one layer, not 30. A Llama, SmolLM2's architecture (the Qwen2's
    compiled step: the test above), greedy ids as the model's own forward (aot_eager: dynamo's graph, no inductor)."""
    tok, L = tokenizer(), 3
    model = llama(tok, L)
    graphs = []

    def backend(gm, example):
        code = gm.print_readable(print_output=False)
        graphs.append((code.count("class subgraph_"), code.count("torch.ops.higher_order.invoke_subgraph(")))
        return torch._dynamo.lookup_backend("aot_eager")(gm, example)
    step = torch.compile(compiled.step, dynamic=True, backend=backend)

    def decode(*args, shared=None):
        with compiled.settings():
            return compiled.decode(*args, shared=shared, run=step)
    seqs = [tok.encode(["The weather in Paris is", "<tool_call>\n"][b % 2], add_special_tokens=False) for b in range(5)]
    got = [[ids for ids, _, _ in sample(model, [None] * 5, seqs, [3, 9, 5, 12, 1], 0.0, stops=[], decode=d)]
           for d in (sampler.forward, decode)]
    assert got[0] == got[1]
    assert graphs and graphs[0] == (1, L)


def test_compiled_rollouts_match_the_reference():
    """rollout(sampler="compiled") against rollout.generate: prompts of different lengths, greedy."""
    tok, model = tokenizer(), tiny_model()
    got = {name: rollout(model, tok, world(5), EchoSim(), Episode(temperature=0.0, max_turns=2, max_tokens=24,
                                                                 sampler=name)) for name in ("generate", "compiled")}
    assert len({len(prompt_ids(tok, r.task)) for r in got["generate"]}) > 1
    for a, b in zip(got["generate"], got["compiled"]):
        assert (a.ids, a.mask, a.stop) == (b.ids, b.mask, b.stop)
        assert b.logprobs == pytest.approx(a.logprobs, abs=1e-5)


def test_a_hooked_model_is_refused():
    """The compiled step reads the weights: a forward hook (or a forward of its own) would be skipped."""
    tok = tokenizer()
    model = calling(tiny_model(), tok, strength=8.0)
    seqs = [tok.encode("The weather in", add_special_tokens=False)] * 2
    with pytest.raises(ValueError, match="forward"):
        sample(model, [None] * 2, seqs, [4, 4], 0.0, stops=[], decode=compiled.decode)
    with pytest.raises(ValueError, match="forward"):  # rollout's "compiled" is this step
        rollout(model, tok, world(2), EchoSim(), Episode(sampler="compiled"))


def test_torchrun_with_the_compiled_sampler_is_refused_at_start(monkeypatch, capsys):
    """FSDP2 shards through forward hooks, which the compiled step would skip: under torchrun
    (WORLD_SIZE > 1) train.py refuses it in one line naming the flag, before anything runs."""
    import train
    assert train.get_args(["--sampler", "compiled"]).sampler == "compiled"  # one process: runs
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert train.get_args(["--sampler", "cached"]).sampler == "cached"
    with pytest.raises(SystemExit) as e:
        train.get_args(["--sampler", "compiled"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert e.value.code == 2 and "--sampler compiled does not run under torchrun" in err
