"""eval.py: toucan metrics on fixture rollouts, the model adapters, CLI smoke runs of every
benchmark on a tiny local model (JSONL written, a rerun resumes), and the plots."""
import json
import threading
import time
from unittest import mock

import pytest
import torch

import eval as E
import hermes
from data import Task
from helpers import tiny_model, tokenizer
from results import append_jsonl, read_jsonl
from rewards import FactsJudge
from rollout import Rollout, generate_turn

INSTALL = ("benchmark extra not installed: pip install -r requirements-bench.txt && "
           "pip install --no-deps -r requirements-bench-nodeps.txt")
CALL = '<tool_call>\n[{"name": "f", "arguments": {"x": %d}}]\n</tool_call>'


# --------------------------------------------------------------------------------------------
# toucan metrics
# --------------------------------------------------------------------------------------------

def row(ptype, name, key, value, process, summary, turns, fmt):
    return dict(parallel_type=ptype, name=name, key=key, value=value, process=process, summary=summary,
                tool_turns=turns, format=fmt)


def test_summarize_both_success_definitions_and_breakdown():
    rows = [row("single_step_single_tool", 1, 1, 1, 1.0, 1.0, 2, 1.0),    # succeeds under both
            row("single_step_single_tool", .5, .5, 0, .5, 1.0, 1, .5),    # neither
            row("irrelevant", 1, 1, 1, .9, 0.0, 0, 0.0)]                  # paper's only: S_sum is 0
    s = E.summarize(rows)
    assert set(s) == {"all", "single_step_single_tool", "irrelevant"}
    a = s["all"]
    assert a["n"] == 3
    assert a["name_f1"] == pytest.approx(2.5 / 3)
    assert a["arg_match"] == pytest.approx((1 + .25 + 1) / 3)
    assert a["process"] == pytest.approx(.8)
    assert a["success"] == pytest.approx(2 / 3) and a["success_code"] == pytest.approx(1 / 3)
    assert a["tool_turns"] == pytest.approx(1.0) and a["format"] == pytest.approx(.5)
    assert s["single_step_single_tool"]["success"] == .5 and s["single_step_single_tool"]["n"] == 2
    assert s["irrelevant"]["success"] == 1.0 and s["irrelevant"]["success_code"] == 0.0
    table = E.format_table({"demo": a}).splitlines()
    assert "Success@0.9(code)" in table[0] and table[1].split()[1:4] == ["3", "0.667", "0.333"]


def fixture_rollout(task, *turns):
    r = Rollout(task, 0, [1, 2], ids=[5] * 10 * len(turns))
    r.turns = [{"text": text, "calls": [], "observations": obs} for text, obs in turns]
    return r


def test_score_rollouts_on_fixture_rollouts():
    task = Task(messages=[], tools=[], allowed_tools=["f"], gold=[[{"name": "f", "arguments": {"x": 1}}]],
                question="What is f of 1?", parallel_type="single_step_single_tool", facts=["42"])
    obs = ['{"y": 42}']
    rs = [fixture_rollout(task, (CALL % 1, obs), ("f of 1 is 42, as asked.", [])),   # perfect
          fixture_rollout(task, ("I believe the answer is 42.", [])),                  # omission
          fixture_rollout(task, (CALL % 2, obs), ("f of 2 is 7, there you go.", []))]  # wrong value, bad summary
    scores = E.score_rollouts(rs, FactsJudge())
    assert [s["process"] for s in scores] == pytest.approx([1.0, 0.0, 0.8])  # 0.8 = all but value (0.20)
    assert [s["summary"] for s in scores] == pytest.approx([1.0, 0.0, 0.0])
    assert [s["score"] for s in scores] == pytest.approx([2.0, -0.5, 0.8])
    assert [s["tool_turns"] for s in scores] == [1, 0, 1] and scores[0]["length"] == 20
    a = E.summarize(scores)["all"]
    assert a["success"] == pytest.approx(1 / 3) and a["success_code"] == pytest.approx(1 / 3)
    assert a["process"] == pytest.approx(0.6) and a["name_f1"] == pytest.approx(2 / 3)
    assert a["arg_match"] == pytest.approx(0.5) and a["format"] == pytest.approx(2 / 3)


# --------------------------------------------------------------------------------------------
# adapters
# --------------------------------------------------------------------------------------------

def test_as_text_renders_what_the_chat_template_renders():
    tok = tokenizer()
    tools = [{"type": "function", "function": {"name": "f", "description": "F.", "parameters": {
        "type": "object", "properties": {"x": {"type": "integer"}}}}}]
    msgs = [{"role": "system", "content": "Sys."}, {"role": "user", "content": "q?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}},
                {"id": "2", "type": "function", "function": {"name": "f", "arguments": {"x": 2}}}]},
            {"role": "tool", "tool_call_id": "1", "content": "r1"}, {"role": "tool", "tool_call_id": "2", "content": "r2"},
            {"role": "assistant", "content": "Done."}, {"role": "user", "content": "more"}]
    text = hermes.as_text(msgs, tools)
    assert all(set(m) == {"role", "content"} for m in text)
    render = lambda m, t=None: tok.apply_chat_template(m, tools=t, tokenize=False, add_generation_prompt=True)  # noqa: E731
    assert render(text) == render(msgs, tools)
    assert render(hermes.as_text(msgs[1:2], tools)) == render(msgs[1:2], tools).replace(
        "You are a helpful assistant.\n\n", "")  # no default system text


def test_generate_turn_can_go_on_past_a_call():
    tok = tokenizer()
    two = tok.encode(CALL % 1 + "\n" + CALL % 2, add_special_tokens=False) + [tok.eos_token_id]

    class Scripted:
        device = torch.device("cpu")

        def generate(self, input_ids, eos_token_id, **kw):
            return torch.cat([input_ids, torch.tensor([two] * len(input_ids))], 1)

    one = generate_turn(Scripted(), tok, [[1, 2]], [100], 0.0, 4)[0]
    both = generate_turn(Scripted(), tok, [[1, 2]], [100], 0.0, 4, stop_at_call=False)[0]
    assert tok.decode(one) == CALL % 1 and both == two


def test_batched_gathers_concurrent_calls():
    sizes = []

    def generate(batch, tools):
        sizes.append(len(batch))
        time.sleep(0.05)
        return [f"{m[0]['content']}:{len(t)}" for m, t in zip(batch, tools)]

    fn = E.Batched(generate, size=4)
    out = {}
    threads = [threading.Thread(target=lambda i=i: out.__setitem__(i, fn([{"content": str(i)}], [0] * i)))
               for i in range(9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == {i: f"{i}:{i}" for i in range(9)}
    assert sum(sizes) == 9 and max(sizes) <= 4 and len(sizes) < 9
    with pytest.raises(ValueError):
        E.Batched(lambda b, t: [], 2)([], [])


# --------------------------------------------------------------------------------------------
# CLI smoke runs on a tiny local model
# --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    """A tiny Qwen2 saved as a Hugging Face folder. It gets its own random output head: with a
    tied one, a 1-layer model greedily repeats its last input token (a newline) forever."""
    path = tmp_path_factory.mktemp("tiny")
    model = tiny_model()
    model.config.tie_word_embeddings = False
    torch.manual_seed(1)
    model.lm_head.weight = torch.nn.Parameter(torch.randn_like(model.lm_head.weight))
    model.save_pretrained(path)
    tokenizer().save_pretrained(path)
    return str(path)


def lines(path):
    return [json.loads(line) for line in open(path)]


def must_not_run(*args, **kwargs):
    raise AssertionError("a finished item ran again")


def test_results_survive_a_line_cut_by_a_crash(tmp_path):
    path = tmp_path / "sub" / "r.jsonl"
    append_jsonl(path, [{"id": 0}, {"id": 1}])
    with open(path, "a") as f:
        f.write('{"id": 2, "cut')                      # the process died mid-line
    assert read_jsonl(path) == [{"id": 0}, {"id": 1}]  # item 2 runs again
    append_jsonl(path, [{"id": 2}])
    assert read_jsonl(path) == [{"id": 0}, {"id": 1}, {"id": 2}] and read_jsonl(tmp_path / "none") == []


def test_toucan_cli_writes_jsonl_and_resumes(tiny_dir, tmp_path):
    out = tmp_path / "toucan.jsonl"
    argv = ["toucan", "--model", tiny_dir, "--out", str(out), "--batch-size", "2", "--max-turns", "2",
            "--max-tokens", "24", "--limit", "3"]
    summary = E.main(argv)
    assert summary["all"]["n"] == 3 and [r["id"] for r in lines(out)] == [0, 1, 2]
    assert json.loads((tmp_path / "toucan.summary.json").read_text()) == summary
    with mock.patch.object(E, "rollout", must_not_run):
        assert E.main(argv) == summary
    E.main(argv[:-1] + ["4"])  # one more task: only that one runs
    assert [r["id"] for r in lines(out)] == [0, 1, 2, 3]


def test_bfcl_cli_writes_jsonl_and_resumes(tiny_dir, tmp_path):
    pytest.importorskip("bfcl_eval", reason=INSTALL)
    out = tmp_path / "bfcl.jsonl"
    argv = ["bfcl", "--model", tiny_dir, "--out", str(out), "--limit", "2", "--batch-size", "4", "--max-tokens", "8"]
    summary = E.main(argv)
    rows = lines(out)
    assert len(rows) == 16 and {r["category"] for r in rows} == set(E.bench_bfcl.AST_CATEGORIES)
    assert all(r["output"] for r in rows) and summary["overall_ast"] == 0.0  # a random model
    with mock.patch.object(E, "generate_turn", must_not_run):
        assert E.main(argv) == summary
    assert len(lines(out)) == 16


def test_tau2_cli_writes_jsonl_and_resumes(tiny_dir, tmp_path):
    pytest.importorskip("tau2", reason=INSTALL)
    out = tmp_path / "tau2.jsonl"
    argv = ["tau2", "--model", tiny_dir, "--user-model", tiny_dir, "--out", str(out), "--num-tasks", "1",
            "--domains", "retail", "telecom", "--max-tokens", "4", "--max-steps", "4"]
    summary = E.main(argv)
    rows = lines(out)
    assert [r["domain"] for r in rows] == ["retail", "telecom"] and summary["per_domain"]["retail"]["n"] == 1
    assert all(r["termination_reason"] == "max_steps" and len(r["messages"]) >= 4 for r in rows), rows
    with mock.patch.object(E, "generate_turn", must_not_run), mock.patch("llm.HFClient.complete", must_not_run):
        assert E.main(argv) == summary
    assert len(lines(out)) == 2


def test_agent_flags_exclude_each_other(tiny_dir, tmp_path):
    with pytest.raises(SystemExit, match="not both"):
        E.main(["bfcl", "--model", tiny_dir, "--agent-url", "http://localhost:1", "--out", str(tmp_path / "x.jsonl")])
    with pytest.raises(SystemExit, match="--user-url"):
        E.main(["tau2", "--model", tiny_dir, "--out", str(tmp_path / "x.jsonl")])


# --------------------------------------------------------------------------------------------
# plots
# --------------------------------------------------------------------------------------------

def test_plot_renders_pngs_from_run_folders(tmp_path):
    pytest.importorskip("matplotlib", reason=INSTALL)
    keys = ["format", "name", "key", "value", "parallel", "process", "summary", "score", "tool_turns",
            "adv_tool_mean", "adv_tool_std", "adv_tool_zero_groups", "adv_sum_mean", "adv_sum_std",
            "adv_sum_zero_groups", "sign_conflict"]
    runs = []
    for k, name in enumerate(["slca-s0", "grpo-s0"]):
        run = tmp_path / name
        run.mkdir()
        metrics = [{"stage": "sft", "epoch": 0, "loss": 2.0}]
        metrics += [{"step": s, **{key: (s + k) / 10 for key in keys}} for s in range(6)]
        evals = [{"label": label, "step": s, "all": {"success": s / 10 + k / 5, "tool_turns": 2 - s / 10}}
                 for label, s in (("before RL", 0), ("after RL", 6))]
        (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
        (run / "eval.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))
        runs.append(str(run))
    E.main(["plot", *runs, "--out", str(tmp_path / "plots"), "--smooth", "2"])
    for name in ("curves.png", "rewards.png", "advantages.png"):
        data = (tmp_path / "plots" / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, name
