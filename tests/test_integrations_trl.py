"""integrations/trl.py through TRL 1.16's own GRPOTrainer: the advantages of the batch TRL built equal
advantage.py's, R_sum moves no gradient on a tool token through TRL's loss, trainer.train() runs on the tiny
policy in the shipped world (offline simulator, facts judge), and bad input gets the documented 0 or one line."""
import copy

import pytest
import torch

pytest.importorskip("trl", reason="optional: pip install -r requirements-bench.txt")
from trl import GRPOConfig

import advantage
import rewards
import simulator
import train
from integrations.trl import SLCAGRPOTrainer
from lib.inputs.data import load_sft, load_tasks
from lib.runs.config import settings
from lib.training import sft, tiny
from rollout import Episode
from segment import segment_masks
from helpers import tiny_model, tokenizer, write_caller_sft, write_world


def config(tmp, steps=1, rows=16, G=4):
    return GRPOConfig(output_dir=str(tmp / "trl"), per_device_train_batch_size=rows, num_generations=G,
                      gradient_accumulation_steps=1, max_steps=steps, learning_rate=1e-3, beta=0.001, use_cpu=True,
                      report_to=[], save_strategy="no", logging_steps=1, disable_tqdm=True, seed=0,
                      gradient_checkpointing=False, dataloader_num_workers=0, shuffle_dataset=False, loss_type="grpo",
                      bf16=False)


@pytest.fixture(scope="module")
def caller(tmp_path_factory):
    """A tiny policy that calls f(x) -> 42 and sums up, often but not always (SFT on the prompts' own
    system text, tools included): its batches hold both segments, one, or a failed call. (folder, tok, tasks)."""
    d = tmp_path_factory.mktemp("fworld")
    rl, _ = write_world(d, n_rl=4)
    convs = load_sft(write_caller_sft(d / "sft.jsonl"))
    tok, model = tokenizer(), tiny_model()
    a = train.get_args(["--data", rl, "--sft-lr", "1e-2", "--sft-batch", "4", "--sft-epochs", "60"])
    sft.warm_start(model, tok, convs, settings(sft.SFT, a), lambda row: None)
    model.save_pretrained(d / "policy")
    tok.save_pretrained(d / "policy")
    return str(d / "policy"), tok, load_tasks(rl)


def trainer(tmp, folder, tok, tasks, **kw):
    torch.manual_seed(0)
    return SLCAGRPOTrainer(folder, tok, tasks, simulator.Simulator(), rewards.FactsJudge(), config(tmp, **kw),
                           episode=Episode(max_tokens=64, max_turns=3, max_tool_rounds=0))


def batch_of(tr):
    """One training batch as TRL builds it (rollout hook, reward functions, advantages), and its rollouts."""
    seen = {}
    tr.rollout_func = lambda prompts, trainer: seen.setdefault("out", tr.roll(prompts, trainer))
    tr.model.train()
    out = tr._generate_and_score_completions(list(tr.get_train_dataloader().__iter__().__next__()))
    return out, seen["out"]["slca_rollout"]


def test_advantages_equal_advantage_py_on_the_batch_trl_built(tmp_path, caller):
    tr = trainer(tmp_path, *caller)
    out, rs = batch_of(tr)
    mask = out["completion_mask"] * out["tool_mask"]                                   # TRL's loss mask
    for i, r in enumerate(rs):                                                          # = the rollout's own mask
        assert mask[i, :len(r.mask)].tolist() == r.mask and not mask[i, len(r.mask):].any()
    tool, summary, tp, sp = segment_masks(mask)
    scores = rewards.score_rollouts(rs, rewards.FactsJudge())                           # scored afresh
    r_tool = torch.tensor([s["r_tool"] for s in scores])
    r_sum = torch.tensor([s["r_sum"] for s in scores])
    gids = torch.arange(len(rs)) // 4
    want = advantage.route(*advantage.slca_advantages(r_tool, r_sum, tp, sp, gids), tool, summary)
    assert out["advantages"].shape == mask.shape and torch.equal(out["advantages"], want)
    assert (out["advantages"][summary.bool()] != 0).any() and (out["advantages"][mask == 0] == 0).all()
    # a batch that tests the presence filter: rollouts without a tool segment (R_tool 0) are left out of P_tool
    everyone = torch.ones_like(tp)
    assert not torch.equal(want, advantage.route(*advantage.slca_advantages(r_tool, r_sum, everyone, sp, gids),
                                                 tool, summary))


def test_r_sum_moves_no_gradient_on_a_tool_token_through_trls_loss(tmp_path, caller):
    tr = trainer(tmp_path, *caller)
    out, _ = batch_of(tr)
    tool, summary, _, _ = segment_masks(out["completion_mask"] * out["tool_mask"])
    grads, r_tool = [], torch.tensor([0.2, 0.9, 0.5, 0.4] * 4)   # any R_tool with spread in every group
    tr.current_gradient_accumulation_steps = 1                     # as TRL's training step sets it
    for r_sum in (tr._rewards[:, 1], torch.tensor([1.0, 0.0, 0.5, 0.25] * 4)):
        inputs = {**out, "advantages": tr.advantages(out, torch.stack([r_tool, r_sum], 1))}
        real, kept = tr._get_per_token_logps_and_entropies, {}

        def leaf(*args, **kw):
            lp, ent, aux = real(*args, **kw)
            kept["lp"] = lp.detach().requires_grad_()
            return kept["lp"], ent, aux
        tr._get_per_token_logps_and_entropies = leaf
        tr._compute_loss(tr.model, inputs).backward()                                  # TRL's own loss
        tr._get_per_token_logps_and_entropies = real
        grads.append(kept["lp"].grad)
    assert torch.equal(grads[0][tool.bool()], grads[1][tool.bool()])                   # bit for bit
    assert not torch.equal(grads[0][summary.bool()], grads[1][summary.bool()])
    assert (grads[0][tool.bool()] != 0).any()


def test_train_runs_steps_on_the_tiny_policy_in_the_shipped_world(tmp_path):
    tasks = load_tasks("data/world/rl.jsonl")[:4]
    tok = tiny.build_tokenizer(tiny.world_texts(tasks, []), vocab_size=400)
    tiny.build_model(tok, 0, hidden=32, layers=1, heads=2).save_pretrained(tmp_path / "base")
    tok.save_pretrained(tmp_path / "base")
    tr = trainer(tmp_path, str(tmp_path / "base"), tok, tasks, steps=2, rows=8)
    before = [p.detach().clone() for p in tr.model.parameters()]
    tr.train()
    rows = [h for h in tr.state.log_history if "loss" in h]
    assert len(rows) == 2 and all(torch.isfinite(torch.tensor(h["loss"])) for h in rows)
    assert {"rewards/process_reward/mean", "rewards/summary_reward/mean"} <= set(rows[0])
    assert any(not torch.equal(a, b) for a, b in zip(before, tr.model.parameters()))


def test_bad_input_gets_the_documented_zero_or_one_line(tmp_path, caller):
    tr = trainer(tmp_path, *caller)
    out, _ = batch_of(tr)
    r = tr._rewards.clone()
    r[0, 1] = float("nan")                                         # a reward function's None or NaN: group 0's Â^sum
    r[5, 0] = float("nan")                                         # and group 1's Â^tool are 0, nothing else moves
    out["completion_mask"][8] = 0                                  # a rollout with no segment at all (masked out)
    A = tr.advantages(out, r)
    tool, summary, tp, sp = segment_masks(out["completion_mask"] * out["tool_mask"])
    assert A.isfinite().all() and (A[8] == 0).all()
    assert (A[:4][summary[:4].bool()] == 0).all() and (A[4:8][tool[4:8].bool()] == 0).all()
    want = advantage.route(*advantage.slca_advantages(r[:, 0], r[:, 1], tp, sp, torch.arange(16) // 4), tool, summary)
    assert torch.equal(A, want)
    broken = copy.deepcopy(tokenizer())                            # a chat template that breaks the mask
    broken.chat_template = "{{ messages|length }}" + tiny.CHAT_TEMPLATE   # (a copy: tokenizer() is shared): a turn re-renders the past
    with pytest.raises(ValueError, match="does not render a tool turn after a user turn as a suffix"):
        batch_of(trainer(tmp_path, caller[0], broken, caller[2]))
