"""SLCA in TRL 1.16: `SLCAGRPOTrainer`, TRL's GRPOTrainer trained on Eq. 8's per-token advantage (README Eqs. 7-8).

    trainer = SLCAGRPOTrainer(model, tok, tasks, simulator, judge, GRPOConfig(...))   # tasks: lib.inputs.data.Task
    trainer.train()

- Multi-turn tool use goes through TRL's rollout hook (`rollout_func`): this project's rollout (rollout.py,
  token in / token out, each tool turn answered by `simulator` and appended by id) runs on the trainer's
  model and hands TRL the prompt and response ids, their sampling log-probs and the response mask as TRL's
  `env_mask` (1 on the policy's tokens, 0 on tool turns; TRL's tool mask).
- Two reward functions, `process_reward` (R_tool) and `summary_reward` (R_sum): Eq. 5 of rewards.score
  (Eqs. 2-5, one scoring per rollout). TRL turns a None into NaN; a judge that gave no answer gives None.
- The advantage: TRL's scalar one is replaced by advantage.slca_advantages (Eq. 7) routed by advantage.route
  (Eq. 8) over Eq. 1's segments of TRL's loss mask (completion_mask x tool_mask), groups of G consecutive
  rows as TRL samples them; `_compute_loss` takes the (B, T) tensor as it is. So a rollout with no summary
  segment, a group with |P_seg| < 2 and a non-finite reward (None, NaN) get advantage.py's documented 0.
- Not here, no setting for them: Eq. 14 (--turn-credit), Eq. 15 (--decision-credit) and Eq. 16 (--extra-call-cost,
  --extra-block-cost), train.py's (Eq. 16 also verl's plug-in's); TRL's loss has no
  dual clip (Eq. 10's c) and no clamp of the log-ratio or of the KL term (Eqs. 9, 11).

A whole run on the demo's world: integrations/trl_example.py. The page, with the comparison against train.py
(integrations/compare.py): docs/integrations.md.
"""
import torch
from datasets import Dataset
from trl import GRPOTrainer

import rewards
from advantage import Credit, route, slca_advantages
from rollout import Episode, rollout
from segment import segment_masks

TASK = "slca_task"  # the dataset column holding each prompt's index into `tasks`


def reward_functions(judge, hierr=rewards.HierR(), workers=16):
    """TRL reward functions (process_reward, summary_reward): R_tool and R_sum of Eq. 5 for each rollout the
    rollout hook made (TRL passes them as `slca_rollout`), each rollout scored once (rewards.score_rollouts under `hierr`);
    None where the judge gave no answer (the rollout is not trained on by train.py; here its R_sum is NaN)."""
    def scored(rs):
        todo = [r for r in rs if not hasattr(r, "hierr")]
        for r, s in zip(todo, rewards.score_rollouts(todo, judge, hierr, workers=workers)):
            r.hierr = s
        return [r.hierr for r in rs]

    def process_reward(prompts, completions, slca_rollout, **kwargs):
        return [s["r_tool"] for s in scored(slca_rollout)]

    def summary_reward(prompts, completions, slca_rollout, **kwargs):
        return [None if s["judge_failed"] else s["r_sum"] for s in scored(slca_rollout)]
    return [process_reward, summary_reward]


class SLCAGRPOTrainer(GRPOTrainer):
    """GRPOTrainer on `tasks` (lib.inputs.data.Task; the dataset is built from them), rollouts by rollout.rollout
    against `simulator` under `episode` (rollout.Episode), rewards HierR with `judge` under `hierr` (rewards.HierR),
    advantages Eqs. 7-8 under `credit` (advantage.Credit: λs, std division, statistics). Settings TRL cannot run
    (Eqs. 14-16, --algo other than slca) are refused. Other keyword arguments go to GRPOTrainer (not reward_funcs,
    rollout_func, tools)."""

    def __init__(self, model, tok, tasks, simulator, judge, args, *, credit=Credit(), episode=Episode(),
                 hierr=rewards.HierR(), **kwargs):
        plain = (credit.algo, credit.turn_credit, credit.decision_credit, hierr.extra_call_cost, hierr.extra_block_cost)
        if plain != ("slca", 0.0, "summary", 0.0, 0.0):
            raise ValueError("SLCAGRPOTrainer trains SLCA (Eqs. 7-8) only: algo slca, turn_credit 0, decision_credit "
                             f"summary, extra_call_cost and extra_block_cost 0 (README Eqs. 14-16 are train.py's), not {plain}")
        self.tasks, self.simulator, self.credit, self.episode = tasks, simulator, credit, episode
        data = Dataset.from_list([{"prompt": t.messages, TASK: i} for i, t in enumerate(tasks)])
        super().__init__(model=model, reward_funcs=reward_functions(judge, hierr), args=args,
                         train_dataset=data, processing_class=tok, rollout_func=self.roll, **kwargs)

    def roll(self, prompts, trainer):
        """TRL's rollout hook: the batch's rollouts by rollout.rollout on the unwrapped policy, sampled
        without gradient in eval mode (rows of one prompt share a group, so its prompt is prefilled once)."""
        ids = [x[TASK] for x in self._batch]
        groups = [self.group_of(k) for k in range(len(ids))]                     # before the switch to eval mode
        model = self.accelerator.unwrap_model(self.model)
        was = model.training
        model.eval()
        with torch.no_grad():
            rs = rollout(model, self.processing_class, [self.tasks[i] for i in ids], self.simulator, self.episode,
                         groups)
        model.train(was)
        return {"prompt_ids": [r.prompt for r in rs], "completion_ids": [r.ids for r in rs],
                "logprobs": [r.logprobs for r in rs], "env_mask": [r.mask for r in rs], "slca_rollout": rs}

    def group_of(self, k):
        """The group of this process's k-th row: TRL samples the G rollouts of a prompt as consecutive rows."""
        G = self.num_generations if self.model.training else self.num_generations_eval
        return (self.accelerator.process_index * len(self._batch) + k) // G

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        self._rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)  # (N, 2)
        return self._rewards

    def _generate_and_score_completions(self, inputs):
        """TRL's step, then its scalar advantage replaced by `advantages` (B, T)."""
        self._batch = inputs
        out = super()._generate_and_score_completions(inputs)
        out["advantages"] = self.advantages(out, self._rewards)
        return out

    def advantages(self, out, r):
        """Eq. 8 (B, T) for this process's rows of TRL's batch `out`, from r (N, 2) = (R_tool, R_sum) of all
        processes' rows, over Eq. 1's segments of TRL's loss mask (completion_mask x tool_mask)."""
        mask = out["completion_mask"] * out["tool_mask"] if "tool_mask" in out else out["completion_mask"]  # (B, T)
        tool, summary, tp, sp = segment_masks(mask)
        tp, sp = self.accelerator.gather(tp).cpu(), self.accelerator.gather(sp).cpu()       # (N,) all processes
        r = r.float().cpu()                                                                 # (N, 2)
        G = self.num_generations if self.model.training else self.num_generations_eval
        gids = torch.arange(len(r)) // G                                                    # (N,)
        c = self.credit
        adv_tool, adv_sum = slca_advantages(r[:, 0], r[:, 1], tp, sp, gids, lam_tool=c.lam_tool, lam_sum=c.lam_sum,
                                            norm_by_std=c.norm_by_std, stats=c.group_stats)  # (N,) each, Eq. 7
        rows = slice(self.accelerator.process_index * len(mask), (self.accelerator.process_index + 1) * len(mask))
        return route(adv_tool[rows].to(mask.device), adv_sum[rows].to(mask.device), tool, summary)  # (B, T) Eq. 8
