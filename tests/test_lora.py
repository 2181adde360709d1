"""LoRA (train.py --lora-r, lib/training/lora.py) at toy size through train.py: SFT and RL train adapters only
(SFT's change to the base is its merged adapter, of rank <= r; the base a run ends with is the SFT
folder bit for bit; the optimizer holds adapter tensors only), the reference log-probs are the frozen
SFT model's exactly, a SIGKILL after a checkpoint and --resume end with an uninterrupted run's
adapter bit for bit at one thread (tests/runs.py), final/ (the adapter) and final/merged load in
eval.py and from_pretrained, and torchrun with --lora-r is refused in one line."""
import json
import os

import pytest
import torch
from safetensors.torch import load_file

import train
from lib.training import dist, lora
from lib.training.model import load_policy
from helpers import write_world
from runs import ARGS, killed_then_resumed, run, same

# over runs.ARGS: rank-4 adapters, final/merged, and a seed and SFT under which every RL step of this toy run has
# a nonzero gradient (test_lora_trains_adapters_only... checks it, so a run that learns nothing fails)
LORA = ["--lora-r", "4", "--merge-lora", "--seed", "3", "--sft-epochs", "8", "--sft-lr", "3e-2", "--group-size", "4"]


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """An uninterrupted LoRA run in a child process at one thread: (folder, rl path, sft path)."""
    tmp = tmp_path_factory.mktemp("lora")
    rl, sft = write_world(tmp)
    p = run(["train.py"], tmp / "straight", rl, sft, *LORA)
    log = p.communicate(timeout=300)[0]
    assert p.returncode == 0, log
    return tmp, rl, sft


def base_weights(model):
    """A PeftModel's base weights under the plain model's names."""
    return {k.replace(".base_layer", ""): v.clone() for k, v in model.get_base_model().state_dict().items()
            if "lora_" not in k}


@pytest.mark.slow
def test_lora_trains_adapters_only_and_the_reference_is_the_sft_model(tmp_path, monkeypatch):
    rl, sft = write_world(tmp_path)
    out = tmp_path / "run"
    refs, ends = [], []
    pair, save = train.old_and_ref_logprobs, train.save_final

    def spy(model, ref, batch, a):  # the run's reference log-probs, and the frozen SFT model's on the same batch
        sampled = batch["logprobs"].clone()
        pair(model, ref, batch, a)
        frozen, again = load_policy(str(out / "sft"))[0].eval(), {**batch, "logprobs": sampled}
        pair(frozen, frozen, again, a)
        refs.append((ref is model, batch["ref_logprobs"], again["ref_logprobs"]))

    def final(model, tok, path, *x, **k):  # the base weights at the end, before --merge-lora merges into them
        if path.endswith("final"):
            ends.append(base_weights(model))
        return save(model, tok, path, *x, **k)

    monkeypatch.setattr(train, "old_and_ref_logprobs", spy)
    monkeypatch.setattr(train, "save_final", final)
    train.main(["--data", rl, "--sft-data", sft, "--out", str(out), *ARGS, *LORA, "--eval-data", rl,
                "--eval-limit", "2", "--show", "0", "--grad-ckpt"])                                # as the paper preset

    # SFT: the embeddings and norms untouched, each target weight changed by a matrix of rank <= 4
    before, after = load_file(out / "base" / "model.safetensors"), load_file(out / "sft" / "model.safetensors")
    targets = [k for k in before if any(f".{t}.weight" in k for t in lora.TARGETS)]
    assert len(targets) == 7 and all(torch.equal(before[k], after[k]) for k in before if k not in targets)
    for k in targets:
        s = torch.linalg.svdvals(after[k].double() - before[k].double())
        assert s[0] > 0 and s[4] < 1e-4 * s[0], k
    # RL: the base ends as the SFT folder bit for bit; the checkpoints hold the adapter and its optimizer only
    end, = ends
    assert all(torch.equal(end[k], after[k]) for k in after)
    state = torch.load(out / "ckpt" / "step-3" / "state.pt", weights_only=True)
    assert len(state["model"]) == 14 and all("lora_" in k for k in state["model"])                 # 7 modules x (A, B)
    assert len(state["optimizer"]["param_groups"][0]["params"]) == 14
    # the reference: the policy itself with its adapters off, equal to the SFT model's log-probs exactly
    assert len(refs) == 4 and all(same_model and torch.equal(got, want) for same_model, got, want in refs)
    rows = [json.loads(x) for x in open(out / "metrics.jsonl") if '"sft"' not in x]
    assert all(r["grad_norm"] > 0 for r in rows) and rows[-1]["kl"] > 0                             # it learned
    assert os.path.isfile(out / "final" / "adapter_model.safetensors")
    assert not os.path.exists(out / "final" / "model.safetensors")


@pytest.mark.slow
def test_sigkill_then_resume_ends_with_the_uninterrupted_adapter(straight):
    tmp, rl, sft = straight
    out = tmp / "killed"
    killed_then_resumed(out, rl, sft, *LORA)
    for f in ("adapter_model.safetensors", "merged/model.safetensors"):
        got, want = load_file(out / "final" / f), load_file(tmp / "straight" / "final" / f)
        assert same(got, want), f
    assert any("lora_B" in k and got.any() for k, got in load_file(out / "final" / "adapter_model.safetensors").items())


@pytest.mark.slow
def test_final_and_merged_load_in_eval_and_from_pretrained(straight, tmp_path):
    import eval as E
    from transformers import AutoModelForCausalLM
    tmp, rl, _ = straight
    final = tmp / "straight" / "final"
    merged = AutoModelForCausalLM.from_pretrained(final / "merged").state_dict()
    loaded = load_policy(str(final))[0].state_dict()                  # the adapter, merged onto ../sft
    assert merged.keys() == loaded.keys() and all(torch.equal(merged[k], loaded[k]) for k in merged)
    sft = load_file(tmp / "straight" / "sft" / "model.safetensors")
    assert not all(torch.equal(merged[k], v) for k, v in sft.items())                     # the RL adapter is in it
    got = [E.main(["toucan", "--model", str(m), "--data", rl, "--limit", "2", "--out", str(tmp_path / f"{i}.jsonl")])
           for i, m in enumerate((final, final / "merged"))]
    assert E.get_args(["toucan", "--model", str(final / "merged"), "--out", "x"]).max_tokens == 40  # the run's config
    for g in got:
        g.pop("fingerprint")
    assert got[0] == got[1] and got[0]["all"]["n"] == 2


def test_a_fresh_adapter_depends_on_the_seed_only():
    """A run resumed between SFT and its first checkpoint builds the RL adapter the uninterrupted run built,
    whatever the global RNG went through before; and the global RNG is left as it was."""
    from helpers import tiny_model
    built = []
    for noise in (0, 1):
        model = tiny_model()
        torch.manual_seed(noise)
        before = torch.get_rng_state()
        m = lora.add_adapter(model, 4, 8.0, 0.0, lora.TARGETS, seed=7)
        assert torch.equal(torch.get_rng_state(), before)
        built.append({k: v for k, v in m.state_dict().items() if "lora_A" in k})
    assert same(*built) and any(v.any() for v in built[0].values())


def test_the_adapter_finds_its_base_from_any_working_directory(tmp_path, monkeypatch):
    """final/'s adapter names its base relative to itself when the base is a folder of the run (the run can
    move), absolutely when it is a local path elsewhere, and a hub name as it is."""
    from helpers import tiny_model
    run, elsewhere = tmp_path / "run", tmp_path / "models" / "q"
    (run / "sft").mkdir(parents=True)
    elsewhere.mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    m = lora.add_adapter(tiny_model(), 4, 8.0, 0.0, lora.TARGETS, seed=0)
    said = {}
    for base in (str(run / "sft"), "models/q", "Qwen/Qwen2.5-3B-Instruct"):
        lora.base_folder(m, base, str(run / "final"))
        said[base] = m.peft_config["default"].base_model_name_or_path
    assert said == {str(run / "sft"): os.path.join("..", "sft"), "models/q": str(elsewhere),
                    "Qwen/Qwen2.5-3B-Instruct": "Qwen/Qwen2.5-3B-Instruct"}


@pytest.mark.parametrize("argv, said", [
    (["--lora-r", "-1"], "--lora-r must be >= 0"),
    (["--merge-lora"], "--merge-lora needs --lora-r"),
    (["--lora-alpha", "8"], "--lora-alpha needs --lora-r"),
    (["--lora-r", "4", "--lora-dropout", "1"], "--lora-dropout must be >= 0 and < 1, not 1.0"),
    (["--lora-r", "4", "--sampler", "compiled"], "--sampler compiled runs a plain Qwen2's or Llama's weights, not LoRA's"),
])
def test_bad_lora_flags_name_the_flag(argv, said, capsys):
    with pytest.raises(SystemExit):
        train.get_args(argv)
    assert said in capsys.readouterr().err


def test_lora_targets_that_name_no_module_stop_before_training(tmp_path):
    rl, _ = write_world(tmp_path)
    with pytest.raises(SystemExit, match=r"^--lora-targets: Target modules \{'nope_proj'\} not found") as e:
        train.main(["--data", rl, "--sft-data", "", "--eval-data", "", "--out", str(tmp_path / "run"), "--tiny-size",
                    "32", "1", "2", "--lora-r", "4", "--lora-targets", "nope_proj"])
    assert "\n" not in str(e.value.code) and (tmp_path / "run" / "metrics.jsonl").read_text() == ""


def test_torchrun_with_lora_is_refused_in_one_line(capsys, monkeypatch):
    """What torchrun sets (WORLD_SIZE): refused while the flags are read, before any process group or model."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(SystemExit):
        train.get_args(["--lora-r", "8", "--mini-batch", "2"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.endswith("--lora-r runs in one process: torchrun (FSDP2) with LoRA is not supported")
    assert dist.world() == 1


def test_plan_counts_lora_as_the_float32_base_and_the_adapters():
    """tools/plan.py with LoRA: 4 B per base parameter plus 16 B per adapter parameter, the rest as without."""
    from tools import plan
    cfg = plan.config("3B")
    h, inter = cfg.hidden_size, cfg.intermediate_size
    kv = cfg.num_key_value_heads * h // cfg.num_attention_heads                            # k and v's output size
    adapters = 8 * cfg.num_hidden_layers * (2 * (h + h) + 2 * (h + kv) + 3 * (h + inter))  # q, o; k, v; gate, up, down
    assert plan.adapter_params(cfg, 8) == adapters
    full, low = plan.plan(cfg, 1, 4, 1), plan.plan(cfg, 1, 4, 1, lora_r=8)  # the 24 GB setting of docs/memory.md
    assert low["states"] == 4 * full["params"] + 16 * adapters
    assert full["peak"] - low["peak"] == pytest.approx(full["states"] - low["states"])
    assert (plan.card(low["peak"]), plan.card(full["peak"])) == (24, 80)
    with pytest.raises(ValueError):
        plan.plan(cfg, 8, 16, 2, lora_r=8)
