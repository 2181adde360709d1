"""SLCA in verl 0.9.1: `algorithm.adv_estimator=slca` (README Eqs. 7-8) and what carries R_tool and R_sum to it.

verl gives a registered estimator the token-level rewards (B, T), its multi-turn response mask (B, T: 0 on
prompt, padding and tool-response tokens, as this project's mask), the group ids (`uid`) and the algorithm
config; nothing else of the batch. So both rewards ride in the token-level rewards, one token each:

    rewards[i, last token of the tool segment] = R_tool_i,   rewards[i, first token of the summary] = R_sum_i

and 0 elsewhere, the segments being Eq. 1's over verl's response mask (segment.segment_masks). `place` writes
that layout, `read` reads it back and refuses any other (one line naming the row and token): verl's own layout
(the one score on the last token) or a KL penalty folded into the reward would otherwise train on garbage.

- `compute_score`: the reward function (custom_reward_function.path/name): HierR (rewards.score, Eqs. 2-5) of
  the decoded trajectory, read as the release's reward read it (`--summary-gate release --reward-input
  decoded`), with README Eq. 16's charge from env SLCA_EXTRA_CALL_COST (c) and SLCA_EXTRA_BLOCK_COST (b), 0
  when unset (train.py's --extra-call-cost, --extra-block-cost; refused in one line outside their range);
  returns {"score", "r_tool", "r_sum", ...}. R_sum is NaN when the judge gave no answer (its group's summary
  advantages are then 0, advantage.py's rule; train.py drops such a rollout instead).
- `SLCAToolAgentLoop` ("slca_tool_agent"): verl's tool agent loop whose calls the project's SGLS answers
  (simulator.Simulator on SLCA_SIM_URL/_MODEL, else replay; verl asks for each call alone, so check 4's turn
  budget, lib/frozen/schema.py, is a call's there) and whose output puts the two rewards where
  `read` finds them; `SLCAHermesParser` ("slca_hermes") reads calls as simulator.py does (a JSON list of
  calls in one block is a parallel step; verl's hermes parser drops it).
- `compute_slca_advantage`, registered as "slca": advantage.slca_advantages then advantage.route.
  Settings: algorithm.norm_adv_by_std_in_grpo (verl's), env SLCA_LAM_TOOL, SLCA_LAM_SUM, SLCA_GROUP_STATS
  ("exact" | "release"). Refused, one line each: SLCA_TURN_CREDIT != 0 (Eq. 14: per-turn rewards do not
  reach an estimator), SLCA_DECISION_CREDIT=tool (Eq. 15: needs the token ids and the tokenizer),
  algorithm.use_kl_in_reward=true.

verl loads it in every process at `import verl`: VERL_USE_EXTERNAL_MODULES=integrations.verl with the
repository on PYTHONPATH. Config and launch command: integrations/verl_slca.yaml; the page: docs/integrations.md.
"""
import asyncio
import json
import math
import os

import numpy as np
import torch
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, register
from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
from verl.experimental.agent_loop.tool_parser import FunctionCall, ToolParser
from verl.tools.schemas import ToolResponse
from verl.trainer.ppo.core_algos import register_adv_est

import rewards
from advantage import STATS, route, slca_advantages
from rollout import stop_ids
from segment import CLOSE, OPEN, drop_blocks, find_blocks, parse_block, segment_masks
from simulator import Simulator
from lib.inputs.data import task_of
from lib.frozen import llm
from lib.runs.config import field_range, outside

NAME, LOOP, PARSER = "slca", "slca_tool_agent", "slca_hermes"  # algorithm.adv_estimator, agent loop, multi_turn.format


# ---------------------------------------------------------------------------------------------
# the carrier: two rewards in the token-level rewards
def slots(response_mask):
    """Eq. 1's segments of a (B, T) response mask and the two reward tokens: (tool_mask, summary_mask,
    tool_present, summary_present, tool_slot, summary_slot); the slots (B,) long are the tool segment's last
    token and the summary's first (-1 / T where the segment is absent)."""
    tool, summary, tp, sp = segment_masks(response_mask)
    pos = torch.arange(response_mask.shape[1], device=response_mask.device)          # (T,)
    tool_slot = torch.where(tool.bool(), pos, -1).amax(1)                              # (B,)
    summary_slot = torch.where(summary.bool(), pos, response_mask.shape[1]).amin(1)    # (B,)
    return tool, summary, tp, sp, tool_slot, summary_slot


def place(response_mask, r_tool, r_sum):
    """Token-level rewards (B, T) float32 holding r_tool (B,) on each row's tool slot and r_sum (B,) on its
    summary slot, 0 elsewhere; a row without the segment drops that reward (it is outside P_seg, Eq. 7)."""
    _, _, tp, sp, ts, ss = slots(response_mask)
    out = torch.zeros(response_mask.shape, dtype=torch.float32, device=response_mask.device)  # (B, T)
    rows = torch.arange(len(out), device=out.device)
    out[rows[tp], ts[tp]] = torch.as_tensor(r_tool, dtype=torch.float32, device=out.device)[tp]
    out[rows[sp], ss[sp]] = torch.as_tensor(r_sum, dtype=torch.float32, device=out.device)[sp]
    return out


def read(token_level_rewards, response_mask):
    """`place`'s inverse: (r_tool, r_sum, tool_mask, summary_mask, tool_present, summary_present), the
    rewards (B,) 0 where the segment is absent. ValueError, naming row and token, when a reward (or a
    NaN) lies off the two slots: the batch was not written by this module's carrier."""
    tool, summary, tp, sp, ts, ss = slots(response_mask)
    x = token_level_rewards                                                             # (B, T)
    rows = torch.arange(len(x), device=x.device)
    on = torch.zeros_like(x, dtype=torch.bool)                                          # (B, T) the slots
    on[rows[tp], ts[tp]] = True
    on[rows[sp], ss[sp]] = True
    stray = (x != 0) & ~on                                                              # NaN != 0
    if stray.any():
        i, t = (int(v) for v in stray.nonzero()[0])
        raise ValueError(f"slca: token_level_rewards row {i} holds {float(x[i, t])} at token {t}, off its two "
                         f"reward tokens (the tool segment's last, the summary's first): train with the agent loop "
                         f"{LOOP!r}, the reward function integrations/verl.py compute_score and "
                         f"algorithm.use_kl_in_reward=false (docs/integrations.md)")
    r_tool = torch.where(tp, x[rows, ts.clamp(min=0)], 0.0)                             # (B,)
    r_sum = torch.where(sp, x[rows, ss.clamp(max=x.shape[1] - 1)], 0.0)                 # (B,)
    return r_tool, r_sum, tool, summary, tp, sp


# ---------------------------------------------------------------------------------------------
# the estimator
def options(config, env=os.environ):
    """The estimator's settings: norm_by_std from verl's algorithm.norm_adv_by_std_in_grpo; λ_tool, λ_sum and
    the group statistics from env SLCA_LAM_TOOL, SLCA_LAM_SUM, SLCA_GROUP_STATS (verl's AlgoConfig takes no
    new keys; the release read its λs from the environment too). ValueError, one line, for what verl cannot
    do here: KL in the reward, Eq. 14 (SLCA_TURN_CREDIT), Eq. 15 (SLCA_DECISION_CREDIT=tool)."""
    get = lambda key, default: default if config is None else config.get(key, default)  # noqa: E731
    if get("use_kl_in_reward", False):
        raise ValueError("slca: algorithm.use_kl_in_reward=true puts a KL term on every token's reward; "
                         "use the KL loss (actor_rollout_ref.actor.use_kl_loss=true), as the release does")
    if float(env.get("SLCA_TURN_CREDIT", 0)):
        raise ValueError("slca: SLCA_TURN_CREDIT (Eq. 14) is not supported in verl: per-turn rewards do not reach "
                         "an advantage estimator (train.py --turn-credit has it)")
    if env.get("SLCA_DECISION_CREDIT", "summary") != "summary":
        raise ValueError("slca: SLCA_DECISION_CREDIT=tool (Eq. 15) is not supported in verl: the decision tokens "
                         "need the token ids and the tokenizer (train.py --decision-credit has it)")
    stats = env.get("SLCA_GROUP_STATS", STATS[0])
    if stats not in STATS:
        raise ValueError(f"slca: SLCA_GROUP_STATS must be one of {STATS}, not {stats!r}")
    return {"lam_tool": float(env.get("SLCA_LAM_TOOL", 1.0)), "lam_sum": float(env.get("SLCA_LAM_SUM", 1.0)),
            "norm_by_std": bool(get("norm_adv_by_std_in_grpo", True)), "stats": stats}


@register_adv_est(NAME)
def compute_slca_advantage(token_level_rewards, response_mask, index=None, config=None, **kwargs):
    """Eqs. 7-8 through verl: per-token advantages (B, T) in token_level_rewards' dtype, returned twice
    (advantages, returns) as verl's outcome estimators do. index: (B,) group ids (verl's uid)."""
    if index is None:
        raise ValueError("slca: no group ids; verl passes non_tensor_batch['uid'] as index")
    opts = options(config)
    r_tool, r_sum, tool, summary, tp, sp = (v.cpu() for v in read(token_level_rewards, response_mask))
    gids = torch.as_tensor(np.unique(np.asarray(index), return_inverse=True)[1].reshape(-1))   # (B,) dense ids
    adv_tool, adv_sum = slca_advantages(r_tool, r_sum, tp, sp, gids, **opts)           # (B,) each, Eq. 7
    A = route(adv_tool, adv_sum, tool, summary)                                         # (B, T) Eq. 8
    A = A.to(device=token_level_rewards.device, dtype=token_level_rewards.dtype)
    return A, A


# ---------------------------------------------------------------------------------------------
# the reward function and the agent loop
_JUDGES, _SIMS = {}, {}  # per process: one judge, one simulator (their clients keep connections)


def judge(url=None, model=None):
    """The summary judge: the LLM judge on url/model (else env SLCA_JUDGE_URL/_MODEL, lib/frozen/llm.py), else the
    offline FactsJudge; one per process."""
    if (url, model) not in _JUDGES:
        _JUDGES[url, model] = rewards.summary_judge(llm.client("judge", llm.Client(url=url, model=model)))
    return _JUDGES[url, model]


def task_of_sample(ground_truth, extra_info=None, prompt=None, tools=None):
    """A verl sample (its reward_model.ground_truth, extra_info and, when known, its raw prompt and its row's
    `tools`, else ground_truth.tool_schemas) as a Task (lib.inputs.data.task_of; a bad field is one line naming it)."""
    question = ground_truth.get("question_content", "") if isinstance(ground_truth, dict) else ""
    messages = list(prompt) if prompt is not None else [{"role": "user", "content": str(question)}]
    row = {"prompt": messages, "reward_model": {"ground_truth": ground_truth}, "extra_info": extra_info or {}}
    return task_of(row if tools is None else {**row, "tools": tools})


def charges(env=os.environ):
    """Eq. 16's c and b as rewards.HierR's fields, from env SLCA_EXTRA_CALL_COST and SLCA_EXTRA_BLOCK_COST (0
    when unset). ValueError, one line naming the variable, outside the range of train.py's flag (lib/runs/config.py)."""
    out = {}
    for key, flag in (("SLCA_EXTRA_CALL_COST", "extra_call_cost"), ("SLCA_EXTRA_BLOCK_COST", "extra_block_cost")):
        text = env.get(key, "0")
        try:
            out[flag] = float(text)
        except ValueError:
            out[flag] = math.nan
        if why := outside(field_range(rewards.HierR, flag), out[flag]):
            raise ValueError(f"slca: {key} {why} (README Eq. 16, train.py --{flag.replace('_', '-')}), not {text!r}")
    return out


def compute_score(data_source, solution_str, ground_truth, extra_info=None, *, judge_url=None, judge_model=None,
                  lam_tool=rewards.LAM, lam_sum=rewards.LAM, **kwargs):
    """verl's reward function: HierR of one decoded trajectory (solution_str, tool responses included), as
    rewards.score_rollouts does with gate "release" and reward_input "decoded", Eq. 16's charge from `charges`.
    Returns verl's dict: "score" (Eq. 4), "r_tool", "r_sum" (Eq. 5; r_sum NaN without a judge answer), the
    parts and Eq. 16's counts ("extra" calls, "extra_blocks"), all floats."""
    task = task_of_sample(ground_truth, {k: v for k, v in (extra_info or {}).items()
                                         if k in ("parallel_type", "tool_responses", "bonus_call", "bonus_args")})
    s = rewards.score(solution_str, rewards.release_final(solution_str), rewards.release_responses(solution_str),
                      task, judge(judge_url, judge_model),
                      rewards.HierR(lam_tool=lam_tool, lam_sum=lam_sum, **charges()))
    r_sum = float("nan") if s["judge_failed"] else s["r_sum"]
    return {"score": s["score"], "r_tool": s["r_tool"], "r_sum": r_sum,
            **{k: float(s[k]) for k in (*rewards.WEIGHTS, "process", "summary", "omission", "judge_failed",
                                                    "extra", "extra_blocks")}}


def simulator():
    """SGLS for the agent loop: the LLM on env SLCA_SIM_URL/_MODEL (lib/frozen/llm.py), else replay of the recorded
    responses; the paper preset's light schema check (the release's). One per process."""
    if not _SIMS:
        _SIMS["sim"] = Simulator(client=llm.client("sim"), schema_check="light")
    return _SIMS["sim"]


@ToolParser.register(PARSER)
class SLCAHermesParser(ToolParser):
    """Hermes calls read as the simulator reads them (segment.parse_block, the release's parser): a block
    holds one call or a JSON list of calls (a parallel step); what does not parse is no call. A turn stops
    at `</tool_call>`, as rollout.py's turns do (docs/method.md §6)."""

    @property
    def stop_token_ids(self):
        return stop_ids(self.tokenizer)

    async def extract_tool_calls(self, responses_ids, tools=None):
        text = await asyncio.get_running_loop().run_in_executor(None, self.tokenizer.decode, responses_ids)
        calls = [c for body in find_blocks(text) for c in parse_block(body, drop_malformed=True)]
        return drop_blocks(text), [FunctionCall(name=c.name, arguments=json.dumps(c.arguments)) for c in calls]


class SLCAOutput(AgentLoopOutput):
    """verl's agent-loop output with rm_scores in `place`'s layout, from the reward function's r_tool and
    r_sum (verl writes the one "score" on the last token)."""

    def as_dict(self):
        out = super().as_dict()
        info = self.extra_fields.get("reward_extra_info") or {}
        if "rm_scores" in out:
            if "r_tool" not in info or "r_sum" not in info:
                raise ValueError("slca: the reward function returned no r_tool and r_sum; set "
                                 "custom_reward_function to integrations/verl.py compute_score")
            out["rm_scores"] = place(out["response_mask"][None], torch.tensor([info["r_tool"]]),
                                     torch.tensor([info["r_sum"]]))[0]                 # (T,)
        return out


@register(LOOP)
class SLCAToolAgentLoop(ToolAgentLoop):
    """verl's tool agent loop, its calls answered by SGLS against the sample's own task, its output SLCAOutput."""

    async def run(self, sampling_params, **kwargs):
        rm = kwargs.get("reward_model") or {}
        self.task = task_of_sample(rm.get("ground_truth", {}), kwargs.get("extra_info"), kwargs.get("raw_prompt"),
                                   kwargs.get("tools"))
        out = await super().run(sampling_params, **kwargs)
        return SLCAOutput(**{k: getattr(out, k) for k in out.model_fields_set})

    async def _call_tool(self, tool_call, tools_kwargs, agent_data):
        text = OPEN + json.dumps({"name": tool_call.name, "arguments": json.loads(tool_call.arguments)}) + CLOSE
        ((_, obs),) = await asyncio.to_thread(simulator().respond, [text], [self.task])
        return ToolResponse(text=obs[0] if obs else ""), 0.0, {}
