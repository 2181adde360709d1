"""The paper preset against the release's recipe, and the flags that turn each deviation back
to the release: --epochs, --sft-weight-decay, --schema-check, --summary-gate, --keep-failed."""
import argparse
import json
import random
import re
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import advantage
import rewards
from lib.training import sft
from lib.runs import config
import train
from lib.inputs.data import Task, data_order, load_sft
from helpers import CALL, tiny_model, tokenizer, write_world

ROOT = Path(__file__).resolve().parent.parent

RELEASE_FILES = {"rl": "data/world/rl.jsonl", "eval": "data/world/eval.jsonl", "sft": "data/world/sft.jsonl"}

RELEASE_GATE = rewards.HierR(summary_gate="release")  # the released reward's summary gate


@pytest.fixture
def paper(monkeypatch):
    """get_args under the paper preset, with the release's splits replaced by the shipped world."""
    monkeypatch.setattr(config, "release_files", lambda: RELEASE_FILES)
    return lambda *flags: train.get_args(["--model", "Qwen/Qwen2.5-3B-Instruct", *flags])


def test_paper_preset_is_the_release_recipe(paper):
    a = paper()
    assert (a.epochs, a.steps, a.sft_weight_decay, a.weight_decay, a.schema_check) == (1, None, 0.0, 0.01, "light")
    assert (a.summary_gate, a.keep_failed) == ("real", False)      # the two safety deviations stay on by default
    d = train.get_args([])                                          # the demo keeps what its numbers were measured with
    assert (d.epochs, d.steps, d.sft_weight_decay, d.schema_check, d.summary_gate, d.keep_failed) == \
        (1, 60, 0.01, "full", "real", False)


def test_release_flags_win_over_both_presets(paper):
    flags = ["--epochs", "5", "--sft-weight-decay", "0.1", "--schema-check", "full", "--summary-gate", "release",
             "--keep-failed"]
    for a in (paper(*flags), train.get_args(flags)):
        assert (a.epochs, a.steps, a.sft_weight_decay, a.schema_check, a.summary_gate, a.keep_failed) == \
            (5, None, 0.1, "full", "release", True)
    assert train.get_args(["--epochs", "2", "--steps", "7"]).steps == 7  # --steps still wins


def test_a_preset_is_a_file_chosen_by_name_or_path_and_flags_win(tmp_path):
    assert (train.get_args([]).preset, train.get_args(["--preset", "paper", "--data", "data/world/rl.jsonl"]).lr) == \
        ("demo", 1e-6)                                              # by name, without --model
    mine = tmp_path / "mine.toml"
    mine.write_text((ROOT / "configs" / "demo.toml").read_text().replace("lr = 1e-4", "lr = 0.5"))
    a = train.get_args(["--preset", str(mine)])
    assert (a.lr, a.sft_lr, a.steps) == (0.5, 6e-3, 60)              # the file's, the rest as the demo's
    assert train.get_args(["--preset", str(mine), "--lr", "0.25"]).lr == 0.25


def help_text(argv, capsys):
    with pytest.raises(SystemExit) as e:
        train.get_args(argv)
    assert e.value.code == 0
    return capsys.readouterr().out


def test_hidden_flags_are_accepted_and_on_help_all(capsys):
    p = train.parser()
    short, full = help_text(["--help"], capsys), help_text(["--help-all"], capsys)
    dests = {a.dest: a for a in p._actions}
    hidden = [a.dest for a in p._actions if getattr(a, "hidden", False)]              # a field's metadata says so
    assert len(hidden) > 40 and {"clip_eps", "gen_batch", "sim_key", "grad_ckpt"} <= set(hidden)
    for dest in hidden:
        assert dest in dests and dests[dest].option_strings[0] not in short, dest    # a flag, and off --help
    assert "--algo" in short and "--sim-url" in short and "--help-all shows every flag" in short
    assert sum(a.help != argparse.SUPPRESS for a in p._actions) < len(p._actions) * 0.6
    entries = re.findall(r"(?m)^ {2}(?:-h, )?(--[a-z][\w-]*)", full)  # each flag's entry, as a user reads it
    assert sorted(entries) == sorted(a.option_strings[-1 if a.dest == "help" else 0] for a in p._actions)
    for a in p._actions:                                                  # and --help-all says what each does
        assert getattr(a, "shown", a.help) not in (None, "", argparse.SUPPRESS), f"{a.option_strings[0]}: no help"
    groups = re.findall(r"(?m)^(\S[^\n]*):$", full)
    assert groups[-2:] == ["run", "diagnostics"] and "model" in groups and "loss (docs/method.md §4)" in groups


def test_eval_py_toucan_help_shows_every_episode_flag(capsys):
    import eval as evaluate
    p = argparse.ArgumentParser()
    for part in evaluate.EPISODE:
        config.flags(p, part)
    with pytest.raises(SystemExit):
        evaluate.get_args(["toucan", "--help"])
    shown = capsys.readouterr().out
    missing = [a.option_strings[0] for a in p._actions if a.option_strings[0] != "-h"
               and not re.search(rf"(?m)^ {{2}}{re.escape(a.option_strings[0])}\b", shown)]
    assert not missing, missing


def test_docs_list_the_flags_off_help_as_the_code_hides_them():
    text = (ROOT / "docs" / "training.md").read_text().split("## Flags not on --help")[1]
    listed = {g: re.findall(r"`--([\w-]+)`", flags) for g, flags in re.findall(r"(?m)^- ([^:]+): (.+)$", text)}
    hidden = {g.title.split(" (")[0]: [a.option_strings[0][2:] for a in g._group_actions if getattr(a, "hidden", False)]
              for g in train.parser()._action_groups}
    assert listed == {g: flags for g, flags in hidden.items() if flags}


def test_train_py_help_all_from_the_command_line():
    out = subprocess.run([sys.executable, "train.py", "--help-all"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    assert "--help-all" in out and "--ppo-epochs" in out and "--sim-deadline" in out and "--show" in out
    a = train.get_args(["--clip-eps", "0.3", "--group-stats", "release", "--sim-deadline", "5"])
    assert (a.clip_eps, a.group_stats, a.sim_deadline) == (0.3, "release", 5.0)


@pytest.mark.parametrize("line,message", [("nope = 1", "'nope' is not a flag a preset sets"),
                                          ("lr = 'fast'", "--lr: invalid num value: 'fast'"),
                                          ("", "sets no --lr and none was given")])
def test_a_bad_preset_file_names_the_setting(tmp_path, capsys, line, message):
    mine = tmp_path / "mine.toml"
    mine.write_text((ROOT / "configs" / "demo.toml").read_text().replace("lr = 1e-4", line))
    with pytest.raises(SystemExit) as e:
        train.get_args(["--preset", str(mine)])
    assert e.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("argv,message", [(["--epochs", "0"], "--epochs must be >= 1"),
                                          (["--sft-weight-decay", "-1"], "--sft-weight-decay must be >= 0"),
                                          (["--summary-gate", "any"], "--summary-gate: invalid choice: 'any'"),
                                          (["--json-depth", "0"], "--json-depth must be >= 1 and <= 256, not 0"),
                                          (["--sim-parse", "any"], "--sim-parse: invalid choice: 'any'")])
def test_bad_recipe_flags_name_the_flag(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        train.get_args(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_each_epoch_has_its_own_seeded_order():
    order = data_order(10, 3, seed=4)
    first = list(range(10))
    random.Random(4).shuffle(first)
    assert order[:10] == first                                      # epoch 0: the order one epoch always had
    epochs = [order[e * 10:(e + 1) * 10] for e in range(3)]
    assert all(sorted(e) == list(range(10)) for e in epochs) and len({tuple(e) for e in epochs}) == 3
    assert data_order(10, 3, seed=4) == order and data_order(10, 3, seed=5) != order


def test_sft_takes_its_own_weight_decay(monkeypatch, tmp_path):
    seen = []
    real = torch.optim.AdamW

    def adamw(params, **k):
        seen.append(k["weight_decay"])
        return real(params, **k)

    monkeypatch.setattr(torch.optim, "AdamW", adamw)
    rl, sft_path = write_world(tmp_path, n_sft=2)
    a = train.get_args(["--data", rl, "--sft-batch", "2", "--sft-epochs", "1", "--sft-weight-decay", "0"])
    sft.warm_start(tiny_model(), tokenizer(), load_sft(sft_path), config.settings(sft.SFT, a), lambda row: None)
    assert seen == [0.0] and a.weight_decay == 0.01                 # RL keeps its own 0.01


# --------------------------------------------------------------------------------------------
# the summary gate
def test_release_responses_are_the_release_regex_and_linear():
    pattern = re.compile(r"<tool_response>(.*?)</tool_response>", re.DOTALL)  # the released reward's
    rng = random.Random(0)
    parts = ["<tool_response>", "</tool_response>", "a", " ", "\n", "<tool_call>", "x"]
    for _ in range(2000):
        text = "".join(rng.choice(parts) for _ in range(rng.randrange(12)))
        assert rewards.release_responses(text) == [m.strip() for m in pattern.findall(text)], text
    ops = {}
    for n in (20_000, 40_000):  # openings without a closing tag: quadratic for a scan that retries each one
        text = "<tool_response>" * n
        t = time.process_time()
        assert rewards.release_responses(text) == []
        ops[n] = time.process_time() - t
    assert ops[40_000] < 3 * ops[20_000] + 0.05


def decoded_rollout(task, turns, responses):
    """What score_rollouts reads from a rollout.Rollout, with real response ids: each turn's
    text, then its observations as the tiny chat template renders a tool turn."""
    tok = tokenizer()
    text = "".join(t + "".join(f"\n<tool_response>\n{o}\n</tool_response>" for o in obs) for t, obs in turns)
    return SimpleNamespace(task=task, text="".join(t for t, _ in turns), final=turns[-1][0], responses=responses,
                           failed=0, tool_turns=sum("<tool_call>" in t for t, _ in turns), stop="done",
                           ids=tok(text, add_special_tokens=False)["input_ids"])


def test_release_gate_opens_on_any_tool_response_block():
    task = Task(messages=[], tools=[], allowed_tools=["f"], gold=[[{"name": "f", "arguments": {"x": 1}}]],
                question="What is f of 1?", parallel_type="single_step_single_tool", facts=["42"])
    error = "Tool 'g' not found in the current available tools set."
    r = decoded_rollout(task, [(CALL.replace('"f"', '"g"'), [error]), ("I think f of 1 is 42, as asked.", [])], [])
    real, = rewards.score_rollouts([r], rewards.FactsJudge())
    release, = rewards.score_rollouts([r], rewards.FactsJudge(), RELEASE_GATE, tok=tokenizer())
    assert real["summary"] == 0.0 and release["summary"] == 1.0    # the error observation opens the release's gate
    assert real["process"] == release["process"]
    seen = []
    judge = SimpleNamespace(rate=lambda q, responses, *rest: seen.append(responses) or 5)
    rewards.score_rollouts([r], judge, RELEASE_GATE, tok=tokenizer())
    assert seen == [[error]]                                        # and the judge sees it as a tool response
    with pytest.raises(ValueError, match="gate"):
        rewards.score_rollouts([r], judge, RELEASE_GATE)


# --------------------------------------------------------------------------------------------
# end to end: epochs and resume, --keep-failed, the gate reaching the scorer
ARGV = ["--sft-data", "", "--eval-data", "", "--group-size", "2", "--prompts-per-step", "2", "--mini-batch", "2",
        "--max-tokens", "16", "--max-turns", "1", "--tiny-size", "32", "1", "2", "--show", "0"]


def prompts_by_step(out):
    steps = {}
    for line in open(out / "rollouts.jsonl"):
        r = json.loads(line)
        steps.setdefault(r["step"], []).append(r["question"])
    return steps


def test_epochs_set_the_steps_and_a_resumed_run_gets_the_same_prompts(tmp_path, monkeypatch):
    rl, _ = write_world(tmp_path)                                   # 4 prompts, 2 per step: 2 steps an epoch
    argv = ["--data", rl, *ARGV, "--epochs", "2", "--save-every", "1"]
    train.main(argv + ["--out", str(tmp_path / "straight")])
    straight = prompts_by_step(tmp_path / "straight")
    assert sorted(straight) == [0, 1, 2, 3]
    epochs = [sorted(set(straight[0] + straight[1])), sorted(set(straight[2] + straight[3]))]
    assert epochs[0] == epochs[1] and len(epochs[0]) == 4           # each epoch sees every prompt once
    assert [straight[s] for s in (0, 1)] != [straight[s] for s in (2, 3)]  # in a new order

    real = train.rl_step

    def dies_in_epoch_2(*a, **k):
        if k["step"] == 3:                                               # step 3, after checkpoint step-3 was written
            raise SystemExit("killed")
        return real(*a, **k)

    monkeypatch.setattr(train, "rl_step", dies_in_epoch_2)
    with pytest.raises(SystemExit, match="killed"):
        train.main(argv + ["--out", str(tmp_path / "cut")])
    monkeypatch.setattr(train, "rl_step", real)
    train.main(argv + ["--out", str(tmp_path / "cut"), "--resume"])
    assert prompts_by_step(tmp_path / "cut")[3] == straight[3]


def test_keep_failed_trains_on_failed_rollouts_and_the_gate_reaches_the_scorer(tmp_path, monkeypatch):
    rl, _ = write_world(tmp_path)
    real_score, real_update, seen = train.score_rollouts, train.ppo_update, {}

    def judge_down(rs, *a, **k):
        seen["gate"], seen["tok"] = a[1].summary_gate, k["tok"]
        out = real_score(rs, *a, **k)
        for i, s in enumerate(out):
            s["judge_failed"] = float(i < len(out) // 4)
        return out

    def update(model, opt, batch, *a, **k):
        seen["mask"] = batch["response_mask"].clone()
        return real_update(model, opt, batch, *a, **k)

    monkeypatch.setattr(train, "score_rollouts", judge_down)
    monkeypatch.setattr(train, "ppo_update", update)
    argv = ["--data", rl, *ARGV, "--steps", "1", "--group-size", "4", "--summary-gate", "release", "--keep-failed"]
    train.main(argv + ["--out", str(tmp_path / "a")])
    m, = [json.loads(x) for x in open(tmp_path / "a" / "metrics.jsonl")]
    assert m["judge_failed"] == 0.25                                # still counted
    assert seen["mask"].sum(1).min() > 0                            # but every rollout keeps its tokens
    assert seen["gate"] == "release" and seen["tok"] is not None


# --------------------------------------------------------------------------------------------
# tools/plan.py: the estimate's arithmetic
def test_plan_counts_the_passes_of_a_step():
    from transformers import Qwen2Config
    from tools import plan as P
    cfg = Qwen2Config(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    cfg._attn_implementation = "sdpa"
    n, f, ratio = P.measure(cfg, 16)
    layer = 64 * 64 * 2 + 64 * 32 * 2 + 3 * 64 * 128                  # q, o; k, v; gate, up, down
    assert f == pytest.approx(3 * 2 * layer + 2 * 64 * 1000 + 3 * 2 * 16 * 64, rel=0.02)  # + causal attention
    assert ratio == pytest.approx(2.0, rel=0.01)
    r = P.plan(cfg, gpus=2, gen_batch=4, micro_batch=1, prompt=8, response=8)
    assert r["tokens"] == P.PROMPTS * 8 + P.ROLLOUTS * 8
    s = r["flops"]["sampling"]
    assert r["flops"]["log-probs"] == pytest.approx(2 * s) and r["flops"]["update"] == pytest.approx(4 * s)
    assert r["states"] == n * 18 / 2 and r["kv_per_token"] == 2 * 3 * 32 * 2



def test_paper_preset_gen_batch_is_the_plans(paper):
    """The paper preset samples tools/plan.py's rows: on one 80 GB GPU their sampling peak leaves
    plan.FREE of the card, the next multiple of G's does not (docs/memory.md)."""
    from tools import plan as P
    a = paper()
    assert a.gen_batch == P.GEN_BATCH and a.gen_batch % a.group_size == 0
    cfg = P.config("3B")
    rows = (a.gen_batch, a.gen_batch + a.group_size)
    peak = {n: P.plan(cfg, 1, n, a.micro_batch)["sampling_peak"] for n in rows}
    assert peak[a.gen_batch] <= 80e9 * (1 - P.FREE) < peak[a.gen_batch + a.group_size], peak
    assert train.get_args([]).gen_batch == 64 and paper("--gen-batch", "64").gen_batch == 64  # the demo's; a flag wins

def release_final_regex(text):
    """The released reward's _extract_final_response, as it is written there."""
    think = re.compile(r"<think(?:ing)?>(.*?)</think(?:ing)?>", re.DOTALL)
    text = think.sub("", text)
    end = text.rfind("</tool_response>")
    if end != -1 and text[end + len("</tool_response>"):].strip():
        return text[end + len("</tool_response>"):].strip()
    end = text.rfind("</tool_call>")
    if end != -1:
        final = text[end + len("</tool_call>"):].strip()
        if "<tool_response>" in final:
            return ""
        return final if final and not final.startswith("<tool_call>") else ""
    return re.sub(r"<tool_call>(.*?)</tool_call>", "", text, flags=re.DOTALL).strip()


def test_release_final_is_the_release_rule_and_linear():
    rng = random.Random(1)
    parts = ["<tool_response>", "</tool_response>", "<tool_call>", "</tool_call>", "<think>", "</thinking>",
             "ab", " ", "\n"]
    for _ in range(3000):
        text = "".join(rng.choice(parts) for _ in range(rng.randrange(12)))
        assert rewards.release_final(text) == release_final_regex(text), text
    ops = {}
    for n in (20_000, 40_000):
        text = "<think><tool_call>" * n
        t = time.process_time()
        rewards.release_final(text)
        ops[n] = time.process_time() - t
    assert ops[40_000] < 3 * ops[20_000] + 0.05


def test_release_gate_judges_a_turn_cut_at_the_cap():
    task = Task(messages=[], tools=[], allowed_tools=["f"], gold=[[{"name": "f", "arguments": {"x": 1}}]],
                question="What is f of 1?", parallel_type="single_step_single_tool", facts=["42"])
    capped = "f of 1 is 42, one more. " + CALL.replace("1", "2")    # the last turn holds a call: cut at the cap
    r = decoded_rollout(task, [(CALL, ['{"y": 42}']), (capped, [])], ['{"y": 42}'])
    r.final = ""                                                    # Rollout.final of such a turn
    real, = rewards.score_rollouts([r], rewards.FactsJudge())
    release, = rewards.score_rollouts([r], rewards.FactsJudge(), RELEASE_GATE, tok=tokenizer())
    assert real["summary"] == 0.0 and release["summary"] == 1.0     # the release rates the text after the response


# --------------------------------------------------------------------------------------------
# --reward-input
def test_decoded_reward_input_scores_a_call_inside_a_tool_response():
    task = Task(messages=[], tools=[], allowed_tools=["f"], gold=[[{"name": "f", "arguments": {"x": 1}}]],
                question="What is f of 1?", parallel_type="single_step_single_tool", facts=["42"])
    r = decoded_rollout(task, [("I will not call anything, here is my answer.", [CALL])], [])
    policy, = rewards.score_rollouts([r], rewards.FactsJudge(), tok=tokenizer())
    decoded, = rewards.score_rollouts([r], rewards.FactsJudge(), rewards.HierR(reward_input="decoded"), tok=tokenizer())
    assert policy["score"] == rewards.OMISSION_SCORE               # the policy wrote no call
    assert decoded["process"] == 1.0                                # the release counts the observation's call
    assert train.get_args(["--reward-input", "decoded"]).reward_input == "decoded"
    assert train.get_args([]).reward_input == "policy"
    with pytest.raises(ValueError, match="reward_input"):
        rewards.score_rollouts([r], rewards.FactsJudge(), rewards.HierR(reward_input="decoded"))


# --------------------------------------------------------------------------------------------
# --group-stats
def test_group_stats_release_reaches_the_advantages():
    scores = [dict(r_tool=0.9, r_sum=0.9, score=0.9, r_succ=1.0, r_action=1.0)] * 16 + \
        [dict(r_tool=0.7, r_sum=0.5, score=0.7, r_succ=1.0, r_action=1.0)]
    tool, summary = torch.tensor([[1.0, 1.0, 0.0]] * 17), torch.tensor([[0.0, 0.0, 1.0]] * 17)
    gids, keep = torch.tensor([0] * 16 + [1]), torch.ones(17, dtype=torch.bool)
    batch = dict(response_mask=tool + summary, tool_mask=tool, summary_mask=summary)
    for algo in ("slca", "grpo"):
        exact = advantage.token_advantages(scores, [[]] * 17, batch, keep, gids, advantage.Credit(algo=algo))
        release = advantage.token_advantages(scores, [[]] * 17, batch, keep, gids,
                                               advantage.Credit(algo=algo, group_stats="release"))
        assert exact.abs().max() == 0 and release[:16].abs().min() > 0.01    # float32 noise on equal rewards
        assert release[16].tolist() == ([0.0] * 3 if algo == "slca" else pytest.approx([0.7 / (1 + 1e-6)] * 3))


# --------------------------------------------------------------------------------------------
# --sim-prompt, --judge-prompt, --solved-prompt
def test_prompt_files_replace_the_frozen_llms_texts(tmp_path):
    from lib.frozen import judges
    import simulator
    (tmp_path / "sim.txt").write_text("SIM {{json}} {definition} then {call}")
    (tmp_path / "judge.txt").write_text("RATE {question} / {responses} / {response}")
    a = train.get_args(["--sim-prompt", str(tmp_path / "sim.txt"), "--judge-prompt", str(tmp_path / "judge.txt")])
    seen = []
    client = SimpleNamespace(complete=lambda batch, t, n: [seen.append(m[-1]["content"]) or
                                                          "<tool_response>{}</tool_response>" for m in batch])
    sim = simulator.Simulator("llm", client=client, schema_check="light", prompt=a.sim_template)
    now = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    sim.respond([CALL], [SimpleNamespace(tools=now, allowed_tools=["f"], responses=[])])
    judge = judges.LLMJudge(SimpleNamespace(complete=lambda batch, t, n: [seen.append(m[-1]["content"]) or "[[good]]"
                                                                           for m in batch]),
                            prompt=a.judge_template, solved_prompt=a.solved_template)
    assert judge.rate("q", ["r"], "ans") == 4
    assert seen[0].startswith("SIM {json} \nTool definition:\n") and seen[0].endswith(" then <tool_call>" + json.dumps(
        [{"name": "f", "parameters": {"x": 1}, "depend_on": []}]) + "</tool_call>")
    assert seen[1].startswith("RATE <question>\nq\n</question> / ")
    d = train.get_args([])
    assert (d.sim_template, d.judge_template, d.solved_template) == (simulator.PROMPT, judges.JUDGE_PROMPT,
                                                                     judges.SOLVED_PROMPT)


@pytest.mark.parametrize("text,why", [("no placeholders", "missing ['call', 'definition']"),
                                      ("{definition} {call} {extra}", "unknown ['extra']"),
                                      ("{definition} {call} {", "not a str.format template"),
                                      (None, "cannot read it")])
def test_bad_prompt_file_is_one_line_naming_flag_and_file(tmp_path, capsys, text, why):
    path = tmp_path / "p.txt"
    if text is not None:
        path.write_text(text)
    with pytest.raises(SystemExit) as e:
        train.get_args(["--sim-prompt", str(path)])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert e.value.code == 2 and f"error: --sim-prompt {path}: " in err and why in err


def test_gpu_probe_says_no_gpu_and_runs_a_cpu_smoke_step(capsys, monkeypatch):
    from tools import probe
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert probe.main([]) == 0 and "no GPU here" in capsys.readouterr().out
    assert probe.main(["--sizes", "tiny", "--device", "cpu", "--prompts", "1", "--group-size", "2",
                       "--new-tokens", "4", "--prompt-tokens", "8"]) == 0
    assert "sample" in capsys.readouterr().out
    assert probe.main(["--sizes", "tiny", "--device", "cpu", "--prompts", "1", "--group-size", "2",
                       "--new-tokens", "4", "--prompt-tokens", "8", "--lora-r", "2"]) == 0
    assert "LoRA r 2" in capsys.readouterr().out
    monkeypatch.setattr(probe.compiled, "compiled", probe.compiled.decode)  # the step uncompiled: no compile here
    assert probe.main(["--sizes", "tiny", "--device", "cpu", "--prompts", "1", "--group-size", "2",
                       "--new-tokens", "4", "--prompt-tokens", "8", "--sampler", "compiled"]) == 0
    assert "sampler compile" in capsys.readouterr().out


def test_a_new_knob_is_one_field_of_the_module_that_uses_it():
    """A field added to a module's settings dataclass (here a fork of rewards.HierR) is train.py's flag, in that
    module's group, with its help, range and default, and the module's object gets its value: nothing else changes
    (docs/training.md "Adding a knob")."""
    import dataclasses
    import rewards
    knob = dataclasses.field(default=0.5, metadata={"help": "a forker's knob", "range": "[0, 1]"})
    fork = dataclasses.make_dataclass("HierR", [("fork_knob", float, knob)], bases=(rewards.HierR,), frozen=True)
    table = [(title, [dataclasses.replace(p, cls=fork) if getattr(p, "cls", None) is rewards.HierR else p for p in parts])
             for title, parts in train.TABLE]
    p = config.parser(table)
    [group] = [g.title for g in p._action_groups for a in g._group_actions if a.dest == "fork_knob"]
    assert group.startswith("rewards and advantages")
    [act] = [a for a in p._actions if a.dest == "fork_knob"]
    flag = "--" + act.dest.replace("_", "-")                                          # named as the field
    assert act.option_strings == [flag] and act.help == "a forker's knob; in [0, 1]" and act.default == 0.5
    assert config.settings(fork, p.parse_args([flag, "0.25"])).fork_knob == 0.25
    assert config.settings(fork, p.parse_args([])).fork_knob == 0.5
    with pytest.raises(SystemExit):
        config.check_bounds(p, p.parse_args([flag, "2"]))
