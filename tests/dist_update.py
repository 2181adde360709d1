"""PPO updates of train.ppo_update on a fixed, synthetic rollout batch, for the distributed
test (tests/test_distributed.py): `torchrun --nproc_per_node N tests/dist_update.py OUT`.

Every rank builds the same global batch (4 prompts × G = 2 rollouts, seeded) and keeps the
rows of its prompts (lib.training.dist.rank_prompts); with N > 1 the policy is sharded with FSDP2 on the
gloo backend. As in train.rl_step, the policy first runs a forward under `gathered` (the
sampling), then the update. Rank 0 saves (weights, loss, grad norm) of each case in CASES to
OUT: both loss aggregations on rows of random ids, token-mean on rows whose G rollouts share
their first SHARED ids (the shared-prompt path: a prompt pass, then the responses), and
token-mean with an output head not tied to the embeddings (the demo's and Qwen2.5-0.5B/3B's are)."""
import sys

import torch

from lib.training import dist
from lib.runs import checkpoints
import train
from helpers import tiny_model

P, G, L = 4, 2, 12
SHARED = 5  # ids a prompt's rollouts have in common in the "shared" case
CASES = {"seq-mean-token-mean": ("seq-mean-token-mean", False, True), "token-mean": ("token-mean", False, True),
         "shared": ("token-mean", True, False), "untied": ("token-mean", False, False)}  # (agg, shared, tied head)
EPS = 1e-6  # AdamW's eps, above float32 rounding of the gradients (see test_distributed.py)


def update(case, rank=0, world=1):
    """Two PPO epochs of two mini-batches on this rank's rows: (weights, loss, grad norm)."""
    agg, shared, tied = CASES[case]
    a = train.get_args(["--data", "data/world/rl.jsonl", "--prompts-per-step", str(P), "--mini-batch", "2",
                        "--group-size", str(G), "--micro-batch", "3", "--lr", "1e-2", "--loss-agg", agg,
                        "--grad-clip", "0.5", "--ppo-epochs", "2", "--device", "cpu"])
    torch.manual_seed(0)
    model = tiny_model()
    if not tied:                                                          # lm_head a weight of its own
        model.config.tie_word_embeddings = False
        model = type(model)(model.config)
    V = model.config.vocab_size
    ids = torch.randint(0, V, (P * G, L))                                 # (B, L)
    if shared:
        ids.view(P, G, L)[:, 1:, :SHARED] = ids.view(P, G, L)[:, :1, :SHARED]
    attn = torch.ones(P * G, L, dtype=torch.long)
    attn[::3, -3:] = 0                                                    # some right padding
    resp = (torch.rand(P * G, L) < 0.7).long() * attn
    resp[:, :3] = 0                                                       # the prompt
    tool = resp * (torch.arange(L) < 7)
    batch = {"input_ids": ids, "attention_mask": attn, "response_mask": resp, "tool_mask": tool,
             "summary_mask": resp - tool}
    old = -torch.rand(P * G, L) * resp                                    # (B, L)
    ref = -torch.rand(P * G, L) * resp
    A = torch.randn(P * G, L) * resp
    rows = [p * G + g for p in dist.rank_prompts(P, a.mini_batch, rank, world) for g in range(G)]
    model = dist.shard(model, a.dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=a.weight_decay, eps=EPS)
    with dist.gathered(model), torch.no_grad():                          # as rl_step: sampling, then the update
        model(input_ids=ids[:1])
    batch = {**batch, "old_logprobs": old, "ref_logprobs": ref, "advantages": A}
    stats, _ = train.ppo_update(model, opt, {k: v[rows] for k, v in batch.items()}, train.Settings.of(a), 0)
    return checkpoints.full_state(model), stats["loss"], stats["grad_norm"]


if __name__ == "__main__":
    a = train.get_args(["--data", "data/world/rl.jsonl", "--device", "cpu"])
    rank, world, a.device = dist.setup_dist(a.device)
    out = {case: update(case, rank, world) for case in CASES}
    if rank == 0:
        torch.save(out, sys.argv[1])
    dist.leave_dist()
    dist.end_worker()
