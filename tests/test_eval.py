"""eval.py and lib/runs/evalcli.py: toucan metrics, result files (fingerprint, resume), aggregation, the benchmark
model adapters (bench/models.py, bench/hermes.py), CLI smoke runs of every benchmark on a
tiny local model, and the plots."""
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import pytest
import torch

import eval as E
import lib.training.precision
from lib.runs import evalcli
from lib.runs.files import append_jsonl, read_jsonl
import bench.__main__ as B
from bench import hermes, models
from lib.inputs.data import Task
from helpers import tiny_model, tokenizer
import rewards
from rewards import FactsJudge
import rollout
from rollout import Episode

INSTALL = ("benchmark extra not installed: pip install -r requirements-bench.txt && "
           "pip install --no-deps -r requirements-bench-nodeps.txt")
CALL = '<tool_call>\n[{"name": "f", "arguments": {"x": %d}}]\n</tool_call>'


# --------------------------------------------------------------------------------------------
# toucan metrics
# --------------------------------------------------------------------------------------------

def row(ptype, name, key, value, process, summary, turns, fmt, score_norm=None):
    return dict(parallel_type=ptype, name=name, key=key, value=value, process=process, summary=summary,
                tool_turns=turns, format=fmt, score_norm=(process + summary) / 2 if score_norm is None else score_norm)


def test_summarize_both_success_definitions_and_breakdown():
    rows = [row("single_step_single_tool", 1, 1, 1, 1.0, 1.0, 2, 1.0),    # succeeds under both
            row("single_step_single_tool", .5, .5, 0, .5, 1.0, 1, .5),    # neither
            row("irrelevant", 1, 1, 1, .9, 0.0, 0, 0.0)]                  # paper's only: S_sum is 0
    s = E.metrics(rows)
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


def test_summarize_release_thresholds():
    """success@t on S_process, success_code@t on the normalised score, tool_success@t on Name F1;
    the release's 1e-9 tolerance applies at t = 1.0 only."""
    rows = [row("a", 1.0, 1, 1, 1 - 1e-12, 1.0, 1, 1, score_norm=1 - 1e-12),  # counts as 1.0
            row("a", 0.75, 1, 1, 0.85, 0.0, 1, 1, score_norm=0.425),
            row("a", 0.9 - 1e-12, 1, 1, 0.9 - 1e-12, 1.0, 1, 1, score_norm=0.95),  # just under 0.9: no tolerance
            row("a", 0.0, 0, 0, 0.0, 0.0, 0, 0, score_norm=0.0)]
    a = E.metrics(rows)["all"]
    assert [a[f"success@{t}"] for t in E.THRESHOLDS] == [0.75, 0.75, 0.25, 0.25]
    assert [a[f"success_code@{t}"] for t in E.THRESHOLDS] == [0.5, 0.5, 0.5, 0.25]
    assert [a[f"tool_success@{t}"] for t in E.THRESHOLDS] == [0.75, 0.5, 0.25, 0.25]
    assert a["success"] == a["success@0.9"] and a["success_code"] == a["success_code@0.9"]


def fixture_rollout(task, responses, *turns, failed=0):
    """What score_rollouts reads from a rollout.Rollout (its contract: text, final, responses,
    failed, tool_turns, stop, ids, task)."""
    texts = [t for t, _ in turns]
    return SimpleNamespace(task=task, text="".join(texts), final="" if "<tool_call>" in texts[-1] else texts[-1],
                           responses=responses, observations=[o for _, obs in turns for o in obs], failed=failed,
                           tool_turns=sum("<tool_call>" in t for t in texts), stop="done", ids=[5] * 10 * len(turns))


def test_score_rollouts_on_fixture_rollouts():
    task = Task(messages=[], tools=[], allowed_tools=["f"], gold=[[{"name": "f", "arguments": {"x": 1}}]],
                question="What is f of 1?", parallel_type="single_step_single_tool", facts=["42"])
    obs = ['{"y": 42}']
    rs = [fixture_rollout(task, obs, (CALL % 1, obs), ("f of 1 is 42, as asked.", [])),   # perfect
          fixture_rollout(task, [], ("I believe the answer is 42.", [])),                  # omission
          fixture_rollout(task, obs, (CALL % 2, obs), ("f of 2 is 7, there you go.", []))]  # wrong value, bad summary
    scores = rewards.score_rollouts(rs, FactsJudge())
    assert [s["process"] for s in scores] == pytest.approx([1.0, 0.0, 0.8])  # 0.8 = all but value (0.20)
    assert [s["summary"] for s in scores] == pytest.approx([1.0, 0.0, 0.0])
    assert [s["score"] for s in scores] == pytest.approx([2.0, -0.5, 0.8])
    assert [s["score_norm"] for s in scores] == pytest.approx([1.0, 0.0, 0.4])
    assert [s["tool_turns"] for s in scores] == [1, 0, 1] and scores[0]["length"] == 20
    a = E.metrics(scores)["all"]
    assert a["success"] == pytest.approx(1 / 3) and a["success_code"] == pytest.approx(1 / 3)
    assert a["process"] == pytest.approx(0.6) and a["name_f1"] == pytest.approx(2 / 3)
    assert a["arg_match"] == pytest.approx(0.5) and a["format"] == pytest.approx(2 / 3)


def test_score_rollouts_judges_the_real_tool_responses_only():
    """The summary is judged on Rollout.responses; an error observation (what the policy saw)
    opens no summary credit. With λ_tool = 2, score_norm = (2·process + summary) / 3."""
    task = Task(messages=[], tools=[], allowed_tools=["f"], gold=[[{"name": "f", "arguments": {"x": 1}}]],
                question="What is f of 1?", parallel_type="single_step_single_tool", facts=["42"])
    seen = ["Error when executing tool: timed out"]
    r = fixture_rollout(task, [], (CALL % 1, seen), ("f of 1 is 42, as asked.", []), failed=1)
    s, = rewards.score_rollouts([r], FactsJudge())
    assert s["summary"] == 0.0 and s["process"] == pytest.approx(1.0) and s["sim_failed"] == 1
    r.responses = ['{"y": 42}']
    s, = rewards.score_rollouts([r], FactsJudge(), rewards.HierR(lam_tool=2.0))
    assert s["summary"] == 1.0 and s["score_norm"] == pytest.approx(1.0)
    assert E.metrics([s])["all"]["sim_failed"] == 1


def test_bonus_rows_get_the_redundant_call_rate():
    """The diagnostic world's marked prompts: `redundant` says whether a valid call to the marked
    tool was made; metrics adds a `bonus` table over the marked rows only."""
    task = Task(messages=[], tools=[], allowed_tools=["f", "g"], gold=[[{"name": "f", "arguments": {"x": 1}}]],
                question="What is f of 1?", parallel_type="single_step_single_tool", facts=["42", "7"], bonus="g")
    plain = Task(**{**task.__dict__, "bonus": ""})
    obs, extra = ['{"y": 42}'], ['{"z": 7}']
    g = '<tool_call>{"name": "g", "arguments": {}}</tool_call>'
    rs = [fixture_rollout(task, obs + extra, (CALL % 1, obs), (g, extra), ("f of 1 is 42, and z is 7.", [])),
          fixture_rollout(task, obs, (CALL % 1, obs), ("f of 1 is 42, as asked.", [])),
          fixture_rollout(task, obs, (CALL % 1 + '<tool_call>{"name": "g", "arguments": "{}"}</tool_call>', obs),
                          ("f of 1 is 42, as asked.", [])),                                   # invalid g call: not made
          fixture_rollout(plain, obs, (CALL % 1, obs), (g, extra), ("f of 1 is 42, and z is 7.", []))]
    scores = rewards.score_rollouts(rs, FactsJudge())
    assert [s.get("redundant") for s in scores] == [1.0, 0.0, 0.0, None]
    b = E.metrics(scores)["bonus"]
    assert b["n"] == 3 and b["redundant"] == pytest.approx(1 / 3)
    assert b["summary"] == pytest.approx((1.0 + 0.5 + 0.5) / 3) and b["name_f1"] == pytest.approx((2 / 3 + 1 + 1) / 3)
    assert "bonus" not in E.metrics(scores[3:])


def test_evaluate_caps_tool_rounds_as_train_does():
    """Issue 17: evaluate (train.py's before/after-RL rows and `eval.py toucan`) caps a trajectory
    at MAX_TOOL_ROUNDS answered tool rounds, the release's 6; 0 = no cap (then the turn cap)."""
    from test_rollout import EchoSim, Scripted
    task = Task(messages=[{"role": "system", "content": "Call tools. row=0"}, {"role": "user", "content": "q?"}],
                tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
                allowed_tools=["f"], gold=[[{"name": "f", "arguments": {"x": 1}}]], question="q?",
                parallel_type="single_step_single_tool", facts=["42"])
    always_call = Scripted(lambda r, t: CALL % 1)
    scores, rs = E.evaluate(always_call, tokenizer(), [task], EchoSim(), FactsJudge(), episode=Episode(max_tokens=4000))
    assert rollout.MAX_TOOL_ROUNDS == 6 and rs[0].stop == "tool_rounds" and scores[0]["tool_turns"] == 7
    scores, rs = E.evaluate(always_call, tokenizer(), [task], EchoSim(), FactsJudge(),
                            episode=Episode(max_tokens=4000, max_tool_rounds=0))
    assert rs[0].stop == "turns" and scores[0]["tool_turns"] == rollout.MAX_TURNS


# --------------------------------------------------------------------------------------------
# result files, fingerprints, aggregation
# --------------------------------------------------------------------------------------------

def test_results_hold_a_lone_surrogate(tmp_path):
    """A policy's observation can hold a lone surrogate (a JSON "\\ud800"): the result line is
    written (ASCII escapes) and reads back the same, instead of a UnicodeEncodeError."""
    append_jsonl(tmp_path / "r.jsonl", [{"id": 0, "turns": [{"text": "x\ud800y"}]}])
    assert read_jsonl(tmp_path / "r.jsonl") == [{"id": 0, "turns": [{"text": "x\ud800y"}]}]


def test_results_survive_a_line_cut_by_a_crash(tmp_path):
    path = tmp_path / "sub" / "r.jsonl"
    append_jsonl(path, [{"id": 0}, {"id": 1}])
    with open(path, "a") as f:
        f.write('{"id": 2, "cut')                      # the process died mid-line
    assert read_jsonl(path) == [{"id": 0}, {"id": 1}]  # item 2 runs again
    append_jsonl(path, [{"id": 2}])
    assert read_jsonl(path) == [{"id": 0}, {"id": 1}, {"id": 2}] and read_jsonl(tmp_path / "none") == []


def test_resume_checks_the_fingerprint(tmp_path):
    path = tmp_path / "r.jsonl"
    fp = {"bench": "bfcl", "agent": "a", "temperature": 0.6, "sim": ["replay", None]}
    assert evalcli.resume(path, fp) == [] and read_jsonl(path) == [{"fingerprint": fp}]
    append_jsonl(path, [{"id": 1}])
    assert evalcli.resume(path, dict(fp)) == [{"id": 1}] and evalcli.resume(None, fp) == []
    with pytest.raises(SystemExit, match=r"made with agent='a', not 'b': use a new --out"):
        evalcli.resume(path, {**fp, "agent": "b"})
    with pytest.raises(SystemExit, match="temperature=0.6, not 0.0"):
        evalcli.resume(path, {**fp, "temperature": 0.0})
    with pytest.raises(SystemExit, match="extra=None, not 1"):
        evalcli.resume(path, {**fp, "extra": 1})
    old = tmp_path / "old.jsonl"
    append_jsonl(old, [{"id": 1}])                     # written before fingerprints
    with pytest.raises(SystemExit, match="without a fingerprint"):
        evalcli.resume(old, fp)
    only = tmp_path / "only.jsonl"                       # a header and no items: nothing to mix
    evalcli.resume(only, fp)
    assert evalcli.resume(only, {"agent": "b"}) == [] and read_jsonl(only) == [{"fingerprint": {"agent": "b"}}]


def test_ident_tells_checkpoints_apart(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
        (d / "model.safetensors").write_bytes(b"\0" * (3 << 20))
        (d / "config.json").write_text("{}")
    assert evalcli.ident(a).startswith(str(a.resolve()) + "@") and evalcli.ident(a).split("@")[1] == evalcli.ident(b).split("@")[1]
    before = evalcli.ident(a)
    with open(a / "model.safetensors", "r+b") as f:      # retrained in place: same size, new tail
        f.seek(-1, 2)
        f.write(b"\1")
    assert evalcli.ident(a) != before
    assert evalcli.ident("Qwen/Qwen2.5-7B-Instruct") == "Qwen/Qwen2.5-7B-Instruct" and evalcli.ident(None) is None


def test_aggregate_mean_and_sample_std(tmp_path, capsys):
    paths = []
    for k, x in enumerate([0.70, 0.80, 0.75]):
        p = tmp_path / f"s{k}.summary.json"
        p.write_text(json.dumps({"fingerprint": {"bench": "toucan", "model": f"m{k}"},
                                 "all": {"n": 200, "success": x}, **({"extra": 1.0} if k else {})}))
        paths.append(str(p))
    paths[0] = paths[0].replace(".summary.json", ".jsonl")   # a result file stands for its summary
    table = E.main(["aggregate", *paths, "--out", str(tmp_path / "agg.json")])
    assert list(table) == ["all.n", "all.success"]            # only what every run has
    assert table["all.success"]["mean"] == pytest.approx(0.75) and table["all.success"]["std"] == pytest.approx(0.05)
    assert table["all.n"] == {"mean": 200, "std": 0.0, "n": 3}
    assert json.loads((tmp_path / "agg.json").read_text()) == table
    assert "0.7500 ± 0.0500" in capsys.readouterr().out
    other = tmp_path / "t.summary.json"
    other.write_text(json.dumps({"fingerprint": {"bench": "tau2"}, "overall": 0.3}))
    with pytest.raises(SystemExit, match="different benchmarks"):
        evalcli.aggregate([paths[1], str(other)])


# --------------------------------------------------------------------------------------------
# benchmark adapters: Hermes text, local decoding, batching
# --------------------------------------------------------------------------------------------

TOOLS = [{"type": "function", "function": {"name": "f", "description": "F.", "parameters": {
    "type": "object", "properties": {"x": {"type": "integer"}}}}}]
CHAT = [{"role": "system", "content": "Sys."}, {"role": "user", "content": "q?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}},
            {"id": "2", "type": "function", "function": {"name": "f", "arguments": {"x": 2}}}]},
        {"role": "tool", "tool_call_id": "1", "content": "r1"}, {"role": "tool", "tool_call_id": "2", "content": "r2"},
        {"role": "assistant", "content": "Done."}, {"role": "user", "content": "more"}]


def test_as_text_renders_what_the_chat_template_renders():
    tok = tokenizer()
    text = hermes.as_text(CHAT, TOOLS)
    assert all(set(m) == {"role", "content"} for m in text)
    render = lambda m, t=None: tok.apply_chat_template(m, tools=t, tokenize=False, add_generation_prompt=True)  # noqa: E731
    assert render(text) == render(CHAT, TOOLS)
    assert render(hermes.as_text(CHAT[1:2], TOOLS)) == render(CHAT[1:2], TOOLS).replace(
        "You are a helpful assistant.\n\n", "")  # no default system text


def test_as_text_toucan_framing():
    tools_block = "# Tools\n<tools>\n" + json.dumps(TOOLS[0]) + "\n</tools>"
    bfcl = hermes.as_text(CHAT, TOOLS, "toucan", keep_system=False)
    assert bfcl[0] == {"role": "system", "content": "You are a helpful assistant.\n\n" + hermes.TOUCAN_RULES
                       + "\n\n" + tools_block}                       # the item's own system message is dropped
    assert [m["role"] for m in bfcl] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert bfcl[2]["content"] == ('<tool_call>\n[{"name": "f", "arguments": {"x": 1}}, '
                                  '{"name": "f", "arguments": {"x": 2}}]\n</tool_call>')  # one JSON-list block
    assert bfcl[3]["content"] == "<tool_response>\nr1\n</tool_response>\n<tool_response>\nr2\n</tool_response>"
    tau2 = hermes.as_text(CHAT, TOOLS, "toucan", keep_system=True)
    assert tau2[0]["content"].startswith("Sys.\n\n# Instructions\n") and tau2[1:] == bfcl[1:]
    assert "JSON list" in hermes.TOUCAN_RULES and "<think>" in hermes.TOUCAN_RULES
    with pytest.raises(ValueError):
        hermes.as_text(CHAT, TOOLS, "xml")


def test_loop_stop():
    stop = models.LoopStop(start=2)
    W = models.LOOP_WINDOW
    loop = torch.tensor([[7, 7] + ([3, 4, 5] * W)[:W + 3]])                     # period 3
    text = torch.tensor([[7, 7] + list(range(W + 3))])                         # no period
    short = torch.tensor([[7, 7] + [3] * (W - 1)])                             # not long enough yet
    assert stop(torch.cat([loop, text]), None).tolist() == [True, False]
    assert stop(short, None).tolist() == [False]
    wide = torch.tensor([[0, 0] + list(range(models.LOOP_PERIOD + 1)) * W])   # period 17: not a loop here
    assert stop(wide[:, :2 + W + 40], None).tolist() == [False]


def test_loop_cut_can_be_turned_off():
    seen = []

    class Model(Scripted):
        def generate(self, input_ids, max_new_tokens, stopping_criteria, **kw):
            seen.append([type(c).__name__ for c in stopping_criteria])
            return super().generate(input_ids, max_new_tokens)
    tok = tokenizer()
    for loop_stop in (True, False):
        models.decode(Model([5, 6]), tok, [[1, 2]], 100, temperature=0.0, batch_size=4, stops=[tok.eos_token_id], loop_stop=loop_stop)
    assert seen == [["LoopStop"], []]
    assert B.get_args(["bfcl", "--out", "x"]).loop_cut
    assert not B.get_args(["bfcl", "--out", "x", "--no-loop-cut"]).loop_cut


def test_system_prompt_file_replaces_the_toucan_rules(tmp_path, capsys):
    rules = tmp_path / "rules.txt"
    rules.write_text('Use {"name": ...} blocks.')                    # braces stay as they are
    a = B.get_args(["bfcl", "--out", "x", "--system-prompt", str(rules)])
    assert a.system_template == 'Use {"name": ...} blocks.'
    assert hermes.as_text(CHAT, TOOLS, "toucan", False, a.system_template)[0]["content"].startswith(
        'You are a helpful assistant.\n\nUse {"name": ...} blocks.\n\n# Tools\n')
    assert B.get_args(["tau2", "--out", "x"]).system_template == hermes.TOUCAN_RULES
    assert B.fingerprint(a)["system_prompt"] != B.fingerprint(B.get_args(["bfcl", "--out", "x"]))["system_prompt"]
    with pytest.raises(SystemExit):
        B.get_args(["bfcl", "--out", "x", "--system-prompt", str(tmp_path / "none.txt")])
    assert f"error: --system-prompt {tmp_path / 'none.txt'}: cannot read it" in capsys.readouterr().err


class Scripted:
    """A model whose generate() appends a fixed continuation to every row, padded like transformers."""
    device = torch.device("cpu")

    def __init__(self, cont, positions=4096):
        self.cont, self.config, self.calls = cont, SimpleNamespace(max_position_embeddings=positions), []

    def generate(self, input_ids, max_new_tokens, **kw):
        self.calls.append(input_ids.shape)
        new = torch.tensor([self.cont[:max_new_tokens]] * len(input_ids))
        return torch.cat([input_ids, new], 1)


def test_decode_cuts_at_stops_budget_and_context():
    tok = tokenizer()
    close, eos, pad = tok.convert_tokens_to_ids("</tool_call>"), tok.eos_token_id, tok.pad_token_id
    m = Scripted([5, close, 6, eos, pad, pad])
    assert models.decode(m, tok, [[1, 2]], 100, temperature=0.0, batch_size=4, stops=[close, eos]) == [[5, close]]
    assert models.decode(m, tok, [[1, 2]], 100, temperature=0.0, batch_size=4, stops=[eos]) == [[5, close, 6, eos]]
    assert models.decode(m, tok, [[1, 2]], 2, temperature=0.0, batch_size=4, stops=[eos]) == [[5, close]]           # the budget
    m = Scripted([5, 6, 7, 8], positions=10)
    out = models.decode(m, tok, [[1] * 8, [1] * 10, [1] * 3], 100, temperature=0.0, batch_size=4, stops=[eos])
    assert out == [[5, 6], [], [5, 6, 7, 8]]     # 2 positions left; none (never generated); budget 7
    assert m.calls == [torch.Size([2, 8])]


def test_local_generate_framings():
    """toucan: hermes text through the plain template, stop at </tool_call>; qwen: the template
    renders the tools and the reply goes on past </tool_call>."""
    tok = tokenizer()
    two = tok.encode(CALL % 1 + "\n" + CALL % 2, add_special_tokens=False) + [tok.eos_token_id]
    m = Scripted(two)
    one = models.local_generate(m, tok, 4, 100, framing="toucan", keep_system=False)([CHAT[:2]], [TOOLS])
    both = models.local_generate(m, tok, 4, 100, framing="qwen")([CHAT[:2]], [TOOLS])
    assert one == [CALL % 1] and both == [CALL % 1 + "\n" + CALL % 2]
    toucan_prompt = tok.apply_chat_template(hermes.as_text(CHAT[:2], TOOLS, "toucan", False), tokenize=False,
                                            add_generation_prompt=True)
    assert m.calls[0][1] == len(tok.encode(toucan_prompt, add_special_tokens=False))


def test_batched_gathers_concurrent_calls():
    sizes = []

    def generate(batch, tools):
        sizes.append(len(batch))
        time.sleep(0.05)
        return [f"{m[0]['content']}:{len(t)}" for m, t in zip(batch, tools)]

    fn = models.Batched(generate, size=4)
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
        models.Batched(lambda b, t: [], 2)([], [])


# --------------------------------------------------------------------------------------------
# CLI smoke runs on a tiny local model
# --------------------------------------------------------------------------------------------

def save_tiny(path, seed):
    """A tiny Qwen2 saved as a Hugging Face folder. It gets its own random output head: with a
    tied one, a 1-layer model greedily repeats its last input token (a newline) forever."""
    model = tiny_model()
    model.config.tie_word_embeddings = False
    torch.manual_seed(seed)
    model.lm_head.weight = torch.nn.Parameter(torch.randn_like(model.lm_head.weight))
    model.save_pretrained(path)
    tokenizer().save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("tiny"), 1)


def lines(path):
    return [json.loads(line) for line in open(path)]


def must_not_run(*args, **kwargs):
    raise AssertionError("a finished item ran again")


def test_toucan_cli_writes_jsonl_and_resumes(tiny_dir, tmp_path):
    out = tmp_path / "toucan.jsonl"
    argv = ["toucan", "--model", tiny_dir, "--out", str(out), "--batch-size", "2", "--max-turns", "2",
            "--max-tokens", "24", "--limit", "3"]
    summary = E.main(argv)
    head, *rows = lines(out)
    assert summary["all"]["n"] == 3 and [r["id"] for r in rows] == [0, 1, 2]
    assert head["fingerprint"] == summary["fingerprint"] and head["fingerprint"]["max_tokens"] == 24
    assert head["fingerprint"]["sim"] == ["replay", None] and head["fingerprint"]["judge"] == "facts"
    assert json.loads((tmp_path / "toucan.summary.json").read_text()) == summary
    with mock.patch.object(E, "rollout", must_not_run):
        assert E.main(argv) == summary
    E.main(argv[:-1] + ["4"])  # one more task: only that one runs
    assert [r["id"] for r in lines(out)[1:]] == [0, 1, 2, 3]


def test_toucan_cli_refuses_another_models_file(tiny_dir, tmp_path):
    """Issue 9: a rerun with another --model, another budget, or a checkpoint retrained in
    place must not report the old numbers."""
    out = tmp_path / "toucan.jsonl"
    argv = ["toucan", "--out", str(out), "--max-turns", "1", "--max-tokens", "8", "--limit", "2"]
    E.main(argv + ["--model", tiny_dir])
    other = save_tiny(tmp_path / "other", 2)
    with mock.patch.object(E, "load_policy", must_not_run), pytest.raises(SystemExit, match="made with model="):
        E.main(argv + ["--model", other])
    with pytest.raises(SystemExit, match="made with max_tokens=8, not 9"):
        E.main(argv[:-3] + ["9", "--limit", "2", "--model", tiny_dir])
    same_path = tmp_path / "same"
    save_tiny(same_path, 1)
    E.main(argv + ["--model", str(same_path), "--out", str(tmp_path / "same.jsonl")])
    save_tiny(same_path, 3)                                   # retrained in place
    with pytest.raises(SystemExit, match="made with model="):
        E.main(argv + ["--model", str(same_path), "--out", str(tmp_path / "same.jsonl")])
    assert len(lines(out)) == 1 + 2                           # nothing was appended


def test_toucan_cli_says_when_bf16_is_emulated(tiny_dir, tmp_path, monkeypatch, capsys):
    """eval.py's one-line note (lib.training.precision.bf16_note) under --dtype bfloat16 on a CPU without native bf16,
    printed before the model loads; none when the CPU has it or the dtype is float32."""
    class Loading(Exception):
        pass

    def load(*args, **kwargs):
        raise Loading
    monkeypatch.setattr(E, "load_policy", load)
    for native, dtype in [(False, "bfloat16"), (True, "bfloat16"), (False, "float32")]:
        monkeypatch.setattr(lib.training.precision, "native_bf16", lambda device, n=native: n)
        with pytest.raises(Loading):
            E.main(["toucan", "--model", tiny_dir, "--dtype", dtype, "--device", "cpu", "--limit", "1",
                    "--out", str(tmp_path / f"{dtype}-{native}.jsonl")])
        said = "no native bfloat16" in capsys.readouterr().out
        assert said is (dtype == "bfloat16" and not native), (native, dtype)


def test_bfcl_cli_writes_jsonl_and_resumes(tiny_dir, tmp_path):
    pytest.importorskip("bfcl_eval", reason=INSTALL)
    from bench import bfcl
    out = tmp_path / "bfcl.jsonl"
    argv = ["bfcl", "--model", tiny_dir, "--out", str(out), "--limit", "1", "--batch-size", "4", "--max-tokens", "8"]
    summary = B.main(argv)
    head, *rows = lines(out)
    assert head["fingerprint"]["framing"] == "toucan" and head["fingerprint"]["bfcl_eval"] == "2025.7.17"
    assert [r["category"] for r in rows] == list(bfcl.RELEASE_CATEGORIES)   # the release's 13, in order
    assert summary["overall"] == 0.0 and summary["per_category"]["multi_turn_base"]["total"] == 1
    with mock.patch("bench.models.decode", must_not_run):
        assert B.main(argv) == summary
    assert len(lines(out)) == 1 + 13


@pytest.mark.slow
def test_tau2_cli_writes_jsonl_and_resumes(tiny_dir, tmp_path):
    pytest.importorskip("tau2", reason=INSTALL)
    out = tmp_path / "tau2.jsonl"
    argv = ["tau2", "--model", tiny_dir, "--user-model", tiny_dir, "--out", str(out), "--num-tasks", "1",
            "--domains", "retail", "telecom", "--max-tokens", "4", "--user-max-tokens", "4", "--max-steps", "4"]
    with mock.patch.object(B, "load_policy", wraps=B.load_policy) as load:
        summary = B.main(argv)
    assert load.call_count == 1                               # agent and user share the one model
    head, *rows = lines(out)
    assert head["fingerprint"]["temperature"] == 0.6 and head["fingerprint"]["user_temperature"] == 0.7
    # one record per task, written as each finishes (completion order: tasks run --batch-size at a time)
    assert sorted(r["domain"] for r in rows) == ["retail", "telecom"] and summary["per_domain"]["retail"]["n"] == 1
    assert all(r["termination_reason"] == "max_steps" and len(r["messages"]) >= 4 for r in rows), rows
    with mock.patch("bench.models.decode", must_not_run):
        assert B.main(argv) == summary
    assert len(lines(out)) == 1 + 2


def test_agent_flags_are_checked_before_the_file_is_touched(tiny_dir, tmp_path):
    out = tmp_path / "x.jsonl"
    with pytest.raises(SystemExit, match="not both"):
        B.main(["bfcl", "--model", tiny_dir, "--agent-url", "http://localhost:1", "--out", str(out)])
    with pytest.raises(SystemExit, match="--user-url"):
        B.main(["tau2", "--model", tiny_dir, "--out", str(out)])
    with pytest.raises(SystemExit, match="give --model"):
        B.main(["bfcl", "--out", str(out)])
    assert not out.exists()


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


@pytest.mark.slow
def test_import_eval_needs_no_extra():
    """Top-level modules never import bench/ (it has its own command line, `python -m bench`)."""
    code = "import sys, eval, train; assert not [m for m in sys.modules if m.startswith('bench')], 'bench imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(E.__file__).parent)


def test_a_marked_call_with_wrong_arguments_counts_only_when_its_arguments_match():
    """--wrong's world: `redundant` is set when the marked tool is called with the marked wrong
    arguments (loosely equal), not when it is called with the gold's; `called` when it is called at all."""
    task = Task(messages=[], tools=[], allowed_tools=["f"], gold=[[{"name": "f", "arguments": {"x": 1, "u": "C"}}]],
                question="What is f of 1 in C?", parallel_type="single_step_single_tool", facts=["42"], bonus="f",
                bonus_args={"u": "F"})
    obs = ['{"y": 42}']
    call = '<tool_call>{"name": "f", "arguments": {"x": 1, "u": "%s"}}</tool_call>'
    rs = [fixture_rollout(task, obs, (call % u, obs), ("f of 1 is 42.", [])) for u in ("F", "C")]
    rs.append(fixture_rollout(task, obs, ("f of 1 is 42.", [])))  # no call: neither
    scores = rewards.score_rollouts(rs, FactsJudge())
    assert [s["redundant"] for s in scores] == [1.0, 0.0, 0.0] and [s["called"] for s in scores] == [1.0, 1.0, 0.0]
