"""integrations/verl.py through verl 0.9.1's own code: the estimator by verl's compute_advantage against
advantage.py on the same batch (bit for bit), the carrier (reward function -> agent-loop output -> rm_scores),
the refusals, the parser, SGLS on a call, and the launch blocks of README.md and docs/integrations.md
through verl's own main_ppo.main up to where it would start Ray (its config loader and validator).

verl is imported by the fixture `v`, not at collection: importing it adds a root logging handler and sets
environment variables, which the fixture gives back once this file's tests are done (the other files of the
same pytest worker then see the process as they would without it)."""
import asyncio
import importlib.util
import json
import logging
import os
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import advantage
import rewards
from lib.frozen import llm
from segment import segment_masks
from blocks import block, commands
from helpers import tokenizer, verl_row

pytestmark = pytest.mark.skipif(importlib.util.find_spec("verl") is None,
                                reason="optional: pip install --no-deps -r requirements-integrations.txt")


@pytest.fixture(scope="module")
def v():
    env, handlers, level = dict(os.environ), list(logging.root.handlers), logging.root.level
    from verl import DataProto
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics
    from verl.experimental.agent_loop.tool_parser import FunctionCall
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo.ray_trainer import compute_advantage
    from integrations import verl as slca
    yield SimpleNamespace(DataProto=DataProto, AgentLoopMetrics=AgentLoopMetrics, FunctionCall=FunctionCall,
                          AlgoConfig=AlgoConfig, compute_advantage=compute_advantage, slca=slca)
    logging.root.handlers[:] = handlers
    logging.root.setLevel(level)
    os.environ.clear()
    os.environ.update(env)


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CALL = '<tool_call>\n[{"name": "f", "arguments": {"x": 1}}]\n</tool_call>'
RESPONSE = '<tool_response>\n{"y": 42}\n</tool_response>'

# twelve rollouts, three groups of four, T = 10: 1 on the policy's tokens, 0 on prompt, observations, padding
MASKS = [[0, 1, 1, 0, 0, 1, 1, 1, 0, 0],   # group a: tool + summary
         [0, 1, 0, 1, 1, 0, 1, 1, 1, 1],   #   two tool turns + summary
         [0, 0, 1, 1, 1, 1, 0, 0, 0, 0],   #   one run: summary only
         [0, 1, 1, 1, 0, 1, 0, 0, 0, 0],   #   tool + a one-token summary
         [0, 1, 1, 0, 1, 1, 0, 0, 0, 0],   # group b: the only tool segment (|P_tool| = 1 < 2)
         [0, 0, 1, 1, 0, 0, 0, 0, 0, 0],   #   summary only
         [0] * 10,                          #   no run: neither segment
         [0, 1, 1, 1, 1, 1, 1, 0, 0, 0],   #   summary only
         [0, 1, 0, 0, 1, 1, 0, 0, 0, 0],   # group c: a non-finite R_sum in the group
         [0, 1, 1, 0, 1, 0, 0, 0, 0, 0],
         [0, 1, 0, 1, 1, 1, 0, 0, 0, 0],
         [0, 0, 0, 1, 0, 1, 1, 0, 0, 0]]
UIDS = ["a"] * 4 + ["b"] * 4 + ["c"] * 4
R_TOOL = [0.55, 0.9, 0.0, 0.3, 0.7, 0.0, 0.0, 0.0, 0.2, 0.6, 0.6, 1.0]
R_SUM = [0.75, 0.25, -0.5, 0.5, 0.25, 1.0, 0.0, 0.5, float("nan"), 0.0, 0.75, 0.25]


def batch(v, masks=MASKS, r_tool=R_TOOL, r_sum=R_SUM, layout=None):
    m = torch.tensor(masks)
    rm = v.slca.place(m, torch.tensor(r_tool), torch.tensor(r_sum)) if layout is None else layout
    return v.DataProto.from_dict(tensors={"token_level_rewards": rm, "response_mask": m},
                                 non_tensors={"uid": np.array(UIDS, dtype=object)}), m


def through_verl(v, data, **algo):
    return v.compute_advantage(data, adv_estimator="slca", config=v.AlgoConfig(**algo)).batch["advantages"]


def test_verl_compute_advantage_equals_advantage_py_bit_for_bit(v):
    data, m = batch(v)
    got = through_verl(v, data, norm_adv_by_std_in_grpo=True)                          # (B, T)
    tool, summary, tp, sp = segment_masks(m)
    gids = torch.tensor([ord(u) for u in UIDS])
    r_tool, r_sum = torch.tensor(R_TOOL), torch.tensor(R_SUM)                        # float32, as verl's rm_scores
    want = advantage.route(*advantage.slca_advantages(r_tool, r_sum, tp, sp, gids), tool, summary)
    assert got.dtype == want.dtype == torch.float32 and torch.equal(got, want)
    # the same numbers from the plain one-group-at-a-time statement of Eq. 7
    plain_tool = advantage.group_normalize(r_tool, tp, gids)
    plain_sum = advantage.group_normalize(r_sum, sp, gids)
    for i in range(len(MASKS)):
        assert torch.equal(got[i][tool[i].bool()], plain_tool[i].expand(int(tool[i].sum())))
        assert torch.equal(got[i][summary[i].bool()], plain_sum[i].expand(int(summary[i].sum())))
    assert got.isfinite().all() and (got[m == 0] == 0).all()                       # nothing off the mask
    assert (got[4:8][tool[4:8].bool()] == 0).all()                                   # |P_tool| = 1 < 2: 0
    assert (got[8:12][summary[8:12].bool()] == 0).all()                              # NaN R_sum: its group's Â^sum 0
    assert (got[8:12][tool[8:12].bool()] != 0).any()                                 # ... and Â^tool untouched
    assert (got[6] == 0).all()                                                       # no run: outside both P_seg
    # a tool token's advantage does not depend on any R_sum (Eq. 8), through verl
    other, _ = batch(v, r_sum=[0.0, 1.0, 0.5, 0.25, 0.5, 0.0, 0.75, 1.0, 0.5, 0.5, 0.25, 0.0])
    assert torch.equal(through_verl(v, other)[tool.bool()], got[tool.bool()])
    # norm_adv_by_std_in_grpo=False, release statistics and λ from the environment: still advantage.py's
    os.environ.update(SLCA_GROUP_STATS="release", SLCA_LAM_TOOL="0.5")
    try:
        got = through_verl(v, batch(v)[0], norm_adv_by_std_in_grpo=False)
    finally:
        del os.environ["SLCA_GROUP_STATS"], os.environ["SLCA_LAM_TOOL"]
    want = advantage.route(*advantage.slca_advantages(r_tool, r_sum, tp, sp, gids, lam_tool=0.5, norm_by_std=False,
                                                      stats="release"), tool, summary)
    assert torch.equal(got, want)


def test_a_batch_not_in_the_carriers_layout_is_refused_in_one_line(v, monkeypatch):
    m = torch.tensor(MASKS)
    last = torch.zeros(m.shape)
    last[:, -1] = 0.5                                           # verl's own layout: one score on the last token
    with pytest.raises(ValueError, match=r"row 0 holds 0.5 at token 9, off its two reward tokens") as e:
        through_verl(v, batch(v, layout=last)[0])
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="use_kl_in_reward"):
        through_verl(v, batch(v)[0], use_kl_in_reward=True)
    monkeypatch.setenv("SLCA_TURN_CREDIT", "0.5")
    with pytest.raises(ValueError, match=r"Eq\. 14\) is not supported in verl"):
        through_verl(v, batch(v)[0])
    monkeypatch.delenv("SLCA_TURN_CREDIT")
    monkeypatch.setenv("SLCA_DECISION_CREDIT", "tool")
    with pytest.raises(ValueError, match=r"Eq\. 15\) is not supported in verl"):
        through_verl(v, batch(v)[0])


ROW = verl_row("What is f of 1?", [[{"name": "f", "arguments": {"x": 1}}]],
               [{"name": "f", "arguments": {"x": 1}, "response": '{"y": 42}'}], ["42"])


def ground_truth():
    return ROW["reward_model"]["ground_truth"], ROW["extra_info"]


class Down:
    def rate(self, *args):
        raise ConnectionError("judge down")


def test_reward_function_is_hierr_with_the_omission_rule_and_a_failed_judge(v, monkeypatch):
    gt, extra = ground_truth()
    good = CALL + "\n" + RESPONSE + "\nf of 1 is 42, as asked."
    s = v.slca.compute_score("slca_world", good, gt, extra)
    task = v.slca.task_of_sample(gt, extra)
    ref = rewards.score(good, "f of 1 is 42, as asked.", ['{"y": 42}'], task, rewards.FactsJudge())
    assert (s["r_tool"], s["r_sum"], s["score"]) == (ref["r_tool"], ref["r_sum"], ref["score"]) == (1.0, 1.0, 2.0)
    omitted = v.slca.compute_score("slca_world", "f of 1 is 42, I think.", gt, extra)   # gold has calls, none made
    assert (omitted["r_tool"], omitted["r_sum"], omitted["omission"]) == (0.0, rewards.OMISSION_SCORE, 1.0)
    monkeypatch.setitem(v.slca._JUDGES, (None, None), Down())
    failed = v.slca.compute_score("slca_world", good, gt, extra)
    assert failed["judge_failed"] == 1.0 and failed["r_sum"] != failed["r_sum"] and failed["r_tool"] == 1.0  # NaN
    with pytest.raises(Exception, match="gold_tool_calls"):
        v.slca.compute_score("slca_world", good, {**gt, "gold_tool_calls": "not json ["}, extra)


def test_reward_function_charges_eq16_from_the_environment_as_train_py_does(v, monkeypatch):
    """The same rollout scored by verl's reward function under SLCA_EXTRA_CALL_COST / SLCA_EXTRA_BLOCK_COST and by
    train.py's (rewards.score_rollouts with --summary-gate release --reward-input decoded --extra-call-cost c
    --extra-block-cost b): equal; the second block repeats the call (one call and one block beyond the gold)."""
    from rollout import Rollout
    gt, extra = ground_truth()
    tok, task = tokenizer(), v.slca.task_of_sample(gt, extra)
    r = Rollout(task, 0, [], tok.encode(CALL + "\n" + RESPONSE + "\n" + CALL + "\n" + RESPONSE + "\nf of 1 is 42."))
    decoded = tok.decode(r.ids, skip_special_tokens=True)
    keys = ("score", "r_tool", "r_sum", "process", "extra", "extra_blocks")
    off = v.slca.compute_score("slca_world", decoded, gt, extra)
    for c, b in ((0.0, 0.0), (0.25, 0.0), (0.0, 0.5), (0.125, 0.25)):
        monkeypatch.setenv("SLCA_EXTRA_CALL_COST", str(c))
        monkeypatch.setenv("SLCA_EXTRA_BLOCK_COST", str(b))
        got = v.slca.compute_score("slca_world", decoded, gt, extra)
        hierr = rewards.HierR(summary_gate="release", reward_input="decoded", extra_call_cost=c, extra_block_cost=b)
        [want] = rewards.score_rollouts([r], rewards.FactsJudge(), hierr, tok=tok)
        assert {k: got[k] for k in keys} == {k: want[k] for k in keys}
        assert (got["extra"], got["extra_blocks"], got["process"]) == (1.0, 1.0, off["process"])
        assert got["r_tool"] == pytest.approx(off["r_tool"] - c - b) and got["r_sum"] == off["r_sum"]
    for bad in ("-0.1", "100.5", "nan", "inf", "a lot"):
        monkeypatch.setenv("SLCA_EXTRA_BLOCK_COST", bad)
        with pytest.raises(ValueError, match=rf"^slca: SLCA_EXTRA_BLOCK_COST must be >= 0 and <= 100 \(README Eq. 16, "
                                             rf"train.py --extra-block-cost\), not '{bad}'$"):
            v.slca.compute_score("slca_world", decoded, gt, extra)


def test_agent_loop_output_carries_both_rewards_into_rm_scores(v):
    mask = [0, 1, 1, 0, 0, 1, 1, 0]
    out = v.slca.SLCAOutput(prompt_ids=[1, 2], response_ids=list(range(8)), response_mask=mask, reward_score=1.25,
                          metrics=v.AgentLoopMetrics(),
                          extra_fields={"reward_extra_info": {"r_tool": 0.75, "r_sum": 0.5}})
    rm = out.as_dict()["rm_scores"]                                                  # (T,)
    assert rm.tolist() == [0, 0, 0.75, 0, 0, 0.5, 0, 0]
    r_tool, r_sum, *_ = v.slca.read(rm[None], torch.tensor([mask]))
    assert (r_tool.item(), r_sum.item()) == (0.75, 0.5)
    bare = v.slca.SLCAOutput(prompt_ids=[1], response_ids=[5, 6], response_mask=[1, 1], reward_score=1.0,
                           metrics=v.AgentLoopMetrics(), extra_fields={"reward_extra_info": {"score": 1.0}})
    with pytest.raises(ValueError, match="returned no r_tool and r_sum"):
        bare.as_dict()


def test_parser_reads_a_parallel_step_and_sgls_answers_each_call(v):
    tok = tokenizer()
    text = '<tool_call>\n[{"name": "f", "arguments": {"x": 1}}, {"name": "g", "arguments": {}}]\n</tool_call>'
    parser = v.slca.SLCAHermesParser(tok)
    assert tok.convert_tokens_to_ids("</tool_call>") in parser.stop_token_ids    # a turn stops at the call
    content, calls = asyncio.run(parser.extract_tool_calls(tok.encode(text)))
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("f", {"x": 1}), ("g", {})] and content == ""
    gt, extra = ground_truth()
    loop = type("Loop", (), {"task": v.slca.task_of_sample(gt, extra, ROW["prompt"], ROW["tools"])})()  # its task
    answer, reward, _ = asyncio.run(v.slca.SLCAToolAgentLoop._call_tool(loop, calls[0], {}, None))
    assert answer.text == '{"y": 42}' and reward == 0.0
    g = v.FunctionCall(name="g", arguments="{}")
    unknown, _, _ = asyncio.run(v.slca.SLCAToolAgentLoop._call_tool(loop, g, {}, None))
    assert unknown.text == "Tool 'g' not found in the current available tools set."


def launched(v, page, tmp, monkeypatch):
    """The config verl's own `main_ppo.main` builds from `page`'s launch block, run in this process up to where it
    would start Ray (its `run_ppo`, replaced here): the block's exports set, then its command line as written, the
    shell's $PWD being the repository's root and $HOME `tmp` (where Hydra also writes its outputs/ folder)."""
    import verl.trainer.main_ppo as main_ppo
    from verl.utils.import_utils import import_external_libs
    *exports, launch = commands(block(page, "export PYTHONPATH").replace("$PWD", ROOT).replace("$HOME", str(tmp)))
    for export in exports:
        assert export[0] == "export"
        for pair in export[1:]:
            monkeypatch.setenv(*pair.split("=", 1))
    assert os.environ["PYTHONPATH"] == ROOT
    import_external_libs(os.environ["VERL_USE_EXTERNAL_MODULES"].split(","))      # what `import verl` does with it
    seen = []
    monkeypatch.setattr(main_ppo, "run_ppo", lambda config, task_runner_class: seen.append(config))
    assert launch[:3] == ["python", "-m", "verl.trainer.main_ppo"]
    monkeypatch.setattr(sys, "argv", ["main_ppo.py", *launch[3:]])
    monkeypatch.chdir(tmp)
    main_ppo.main()                                   # Hydra over verl's ppo_trainer defaults, validate_config
    return seen[0]


def test_the_launch_lines_run_verls_own_main_up_to_ray(v, tmp_path, monkeypatch):
    """README.md's launch and docs/integrations.md's (which adds the data files) as written, on a CPU: what needs
    GPUs (Ray's workers, vLLM, the actor) starts after the point reached here."""
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass
    cfg = launched(v, "README.md", tmp_path, monkeypatch)
    assert get_adv_estimator_fn(cfg.algorithm.adv_estimator) is v.slca.compute_slca_advantage
    algo = omega_conf_to_dataclass(cfg.algorithm)
    assert (algo.adv_estimator, algo.use_kl_in_reward) == (v.slca.NAME, False)
    rollout = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
    assert (rollout.agent.default_agent_loop, rollout.multi_turn.format) == (v.slca.LOOP, v.slca.PARSER)
    assert cfg.reward.custom_reward_function.path == "integrations/verl.py"
    assert cfg.actor_rollout_ref.model.path == "Qwen/Qwen2.5-3B-Instruct" and cfg.actor_rollout_ref.rollout.n == 16
    assert need_reference_policy(cfg) and not need_critic(cfg)                      # KL loss to the SFT, no critic
    assert llm.client("sim").base_url == "http://sim:8003/v1" and llm.client("judge").base_url == "http://judge:8016/v1"
    through_verl(v, batch(v)[0], norm_adv_by_std_in_grpo=algo.norm_adv_by_std_in_grpo)
    cfg = launched(v, "docs/integrations.md", tmp_path, monkeypatch)
    assert cfg.algorithm.adv_estimator == v.slca.NAME
    assert (cfg.data.train_files, cfg.data.val_files) == tuple(str(tmp_path / "data" / f) for f in (
        "toucan_toolcall_rl.parquet", "toucan_eval_4k_unified.parquet"))
