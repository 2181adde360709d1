"""credit/page.py, the credit page, read back from a real headless Chromium (`--dump-dom`): a toy
demo run's group, a scripted run that trained on Eqs. 14 and 15, and the README's --example; every
token's advantage and colour against advantage.py, and hostile text that must stay text."""
import json
import os
import shutil
import subprocess
from html.parser import HTMLParser

import pytest
import torch

import train
from advantage import grpo_advantages, slca_advantages
from test_train import scripted_sampling, two_step_world
from credit import page as credit

BROWSER = shutil.which("chromium-headless-shell") or shutil.which("chromium")


def browse(page, *flags):
    """Chromium's flags over the page: its DOM after loading (--dump-dom), or a screenshot."""
    if BROWSER is None:  # .ci/run installs it; a developer's machine may not have it
        (pytest.fail if os.environ.get("CI") else pytest.skip)("needs headless Chromium: apt-get install chromium-headless-shell")
    r = subprocess.run([BROWSER, "--no-sandbox", "--disable-gpu", *flags, f"file://{page}"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


class Tokens(HTMLParser):
    """The page's token spans: {(rollout, column label): [attrs]}, and every element's attributes."""

    def __init__(self):
        super().__init__()
        self.cols, self.elements, self.at, self.body = {}, [], [None, None], {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.elements.append((tag, a))
        if tag == "body":
            self.body = a
        if tag == "section":
            self.at[0] = int(a["data-i"])
        elif "col" == a.get("class"):
            self.at[1] = a["data-algo"].split(":")[0]
        elif (a.get("class") or "").startswith("t ") and self.at[0] is not None:
            self.cols.setdefault(tuple(self.at), []).append(a)


def dom(page):
    p = Tokens()
    p.feed(browse(page, "--dump-dom"))
    return p


def check_page(p, rows, cols):
    """Per rollout and column: one span per response id, in order, its A as advantage.py's, its
    background the page scale's colour of it on policy tokens, none on observations."""
    scale = float(p.body["data-scale"])
    for label, A in cols:
        label = label.split(":")[0]
        for i, row in enumerate(rows):
            spans = p.cols[(i, label)]
            assert [int(s["data-id"]) for s in spans] == row["ids"]
            for t, (s, m) in enumerate(zip(spans, row["mask"])):
                assert float(s["data-a"]) == float(A[i, t])
                assert s.get("style") == (f"background:{credit.colour(float(A[i, t]), scale)}" if m else None)
                assert (s["data-seg"] == "observation") == (m == 0)


def test_colours_by_hand():
    assert credit.colour(2.0, 2.0) == "rgb(215,48,39)" and credit.colour(-2.0, 2.0) == "rgb(69,117,180)"
    assert credit.colour(0.0, 2.0) == "rgb(255,255,255)" == credit.colour(0.3, 0.0)
    assert credit.colour(1.0, 2.0) == "rgb(235,152,147)" and credit.colour(-9.0, 2.0) == "rgb(69,117,180)"  # clamped


@pytest.mark.slow
def test_a_demo_run_is_viewable_and_the_page_is_its_advantages(tmp_path):
    """A toy run of the demo (the shipped world, the tiny model) logs credit.jsonl; the page of a group
    whose rewards differ opens in Chromium, and its SLCA column is what the run logged (rollouts.jsonl);
    the last step's first group is the default page."""
    out = tmp_path / "run"
    train.main(["--tiny-size", "32", "1", "2", "--sft-limit", "64", "--sft-epochs", "2", "--sft-lr", "3e-3",
                "--sft-batch", "8", "--steps", "2",
                "--group-size", "4", "--prompts-per-step", "2", "--mini-batch", "1", "--max-tokens", "60",
                "--max-turns", "2", "--eval-data", "", "--show", "0", "--out", str(out)])
    assert credit.main([str(out)]) == str(out / "credit.html") and "step 1, prompt 0" in (out / "credit.html").read_text()
    logged = [json.loads(x) for x in open(out / "rollouts.jsonl")]
    step, group = next((r["step"], r["group"]) for r in logged if r["adv_sum"] or r["adv_tool"])  # rewards differ
    groups = sorted({r["group"] for r in logged if r["step"] == step})
    page = credit.main([str(out), "--step", str(step), "--prompt", str(groups.index(group)), "--out", str(tmp_path / "p.html")])
    rows = [r for r in map(json.loads, open(out / "credit.jsonl")) if (r["step"], r["group"]) == (step, group)]
    logged = [r for r in logged if (r["step"], r["group"]) == (step, group)]
    assert len(rows) == 4 == len(logged)
    cfg = json.load(open(out / "config.json"))
    assert "dtype_note" not in cfg  # printed, not a flag of the saved config
    tok = credit.tokenizer(str(out), cfg)
    cols = credit.advantages(rows, cfg, lambda ids: tok.decode(ids))[0]
    assert [c[0].split(" (")[0] for c in cols] == ["SLCA", "GRPO"]
    p = dom(page)
    check_page(p, rows, cols)
    assert any(float(s["data-a"]) != 0 for i in range(4) for s in p.cols[(i, "SLCA (Eq. 8)")])
    for i, (row, log) in enumerate(zip(rows, logged)):
        for s, m in zip(p.cols[(i, "SLCA (Eq. 8)")], row["mask"]):
            if m:
                want = log["adv_tool"] if s["data-seg"] == "tool" else log["adv_sum"]
                assert float(s["data-a"]) == pytest.approx(want, abs=1e-6)
    grpo = grpo_advantages(torch.tensor([log["score"] for log in logged]), torch.zeros(4, dtype=torch.long))
    for i, row in enumerate(rows):
        assert all(float(s["data-a"]) == pytest.approx(float(grpo[i]), abs=1e-6)
                   for s, m in zip(p.cols[(i, "GRPO (Eq. 6)")], row["mask"]) if m)
    with pytest.raises(SystemExit, match="--step 7: not logged"):
        credit.main([str(out), "--step", "7"])
    with pytest.raises(SystemExit, match="--prompt 5: step 1 logged 2 groups"):
        credit.main([str(out), "--prompt", "5"])


@pytest.mark.slow
@pytest.mark.parametrize("flags,first", [
    (["--turn-credit", "0.5", "--decision-credit", "tool"], "SLCA + Eq. 14 + Eq. 15, trained on"),
    (["--no-norm-by-std", "--lam-tool", "0.5"], "SLCA (Eq. 8)"),
    (["--algo", "grpo", "--group-stats", "release"], "GRPO (Eq. 6)"),
    (["--algo", "toolpo"], "ToolPO (Eq. 13), trained on")])
def test_the_first_column_is_what_train_py_trained_on(tmp_path, monkeypatch, flags, first):
    """Scripted rollouts (two tool turns, then the answer; the second rollout of each group dropped by a
    failed rating): the page's first column, token for token, is the A train.py passed to the loss
    (spied), for each --algo and advantage setting; under Eq. 15 the summary's boxed first token is paid
    Â_tool; every turn after an answer opens boxed."""
    scripted_sampling(monkeypatch)
    trained, real_scores, real_adv = [], train.score_rollouts, train.token_advantages

    def scores(rs, *args, **kw):
        out = real_scores(rs, *args, **kw)
        for i in range(1, len(out), 4):
            out[i]["judge_failed"] = 1.0  # dropped from the loss and the group statistics
        return out

    def spy(*args, **kw):
        A = real_adv(*args, **kw)
        trained.append((A, args[4]))                                                    # group_ids
        return A
    monkeypatch.setattr(train, "score_rollouts", scores)
    monkeypatch.setattr(train, "token_advantages", spy)
    out = tmp_path / "run"
    train.main(["--data", two_step_world(tmp_path), "--sft-data", "", "--eval-data", "", "--tiny-size", "32", "1", "2",
                "--steps", "1", "--group-size", "4", "--prompts-per-step", "2", "--mini-batch", "1", "--max-turns", "3",
                "--old-logprobs", "recompute", *flags, "--out", str(out)])
    page = credit.main([str(out), "--step", "0", "--prompt", "1"])
    rows = [r for r in map(json.loads, open(out / "credit.jsonl")) if r["group"] == 1]
    assert [r["keep"] for r in rows] == [True, False, True, True] and "prompt" in rows[0] and "prompt" not in rows[1]
    cfg = json.load(open(out / "config.json"))
    assert credit.columns(cfg)[0][0] == first
    tok = credit.tokenizer(str(out), cfg)
    p = dom(page)
    check_page(p, rows, credit.advantages(rows, cfg, lambda ids: tok.decode(ids))[0])
    [(A, gids)] = trained
    at_step = A[gids == 1]                                                               # (G, L) the group's rows
    n = len(rows[0]["prompt"])
    for i, row in enumerate(rows):
        spans = p.cols[(i, first)]
        assert [float(s["data-a"]) for s in spans] == at_step[i, n:n + len(row["ids"])].tolist()
        boxed = [t for t, s in enumerate(spans) if "dec" in s["class"].split()]
        opens = [t for t in range(1, len(row["mask"])) if row["mask"][t] and not row["mask"][t - 1]]
        assert boxed == (opens if row["keep"] else [])                                  # one token each: the demo BPE
    if "--decision-credit" in flags:
        at, _ = slca_advantages(*(torch.tensor([r["rewards"][k] for r in rows]) for k in ("r_tool", "r_sum")),
                                torch.tensor([r["keep"] for r in rows]), torch.tensor([r["keep"] for r in rows]),
                                torch.zeros(4, dtype=torch.long))
        for i in (0, 2, 3):
            spans = p.cols[(i, first)]
            start = next(t for t, s in enumerate(spans) if s["data-seg"] == "summary")
            assert float(spans[start]["data-a"]) == pytest.approx(float(at[i]), abs=1e-6) != 0   # Eq. 15: Â_tool


@pytest.mark.slow
def test_the_readme_example_in_chromium(tmp_path):
    """--example: under SLCA the right call is paid + and the bad summary −, the wrong call − and the good
    summary +; under GRPO each rollout's tokens share one sign. A screenshot is taken."""
    page = credit.main(["--example", "--out", str(tmp_path / "ex.html")])
    p = dom(page)
    sign = lambda i, col, seg: {float(s["data-a"]) > 0 for s in p.cols[(i, col)] if s["data-seg"] == seg}  # noqa: E731
    assert sign(0, "SLCA (Eq. 8)", "tool") == {True} and sign(0, "SLCA (Eq. 8)", "summary") == {False}
    assert sign(1, "SLCA (Eq. 8)", "tool") == {False} and sign(1, "SLCA (Eq. 8)", "summary") == {True}
    assert sign(0, "GRPO (Eq. 6)", "tool") == sign(0, "GRPO (Eq. 6)", "summary") == {False}
    assert sign(1, "GRPO (Eq. 6)", "tool") == sign(1, "GRPO (Eq. 6)", "summary") == {True}
    browse(page, f"--screenshot={tmp_path / 'ex.png'}", "--window-size=1300,800")
    assert (tmp_path / "ex.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_hostile_text_stays_text(tmp_path):
    """A policy that writes a script, an observation with markup, a question that closes the title:
    all shown as characters; Chromium's DOM holds no element the text wrote and no script ran."""
    pieces = {1: "<script>document.body.setAttribute('data-pwned','1')</script>", 2: '"><img src=x onerror="x()">',
              3: "</title><script>alert(1)</script>", 4: "ok"}
    row = lambda ids, mask, r: {"step": 0, "group": 0, "prompt": [3], "ids": ids, "mask": mask, "keep": True,  # noqa: E731
                                "r_turn": [], "rewards": {"process": r, "summary": 1 - r, "score": 1.0, "r_tool": r,
                                                          "r_sum": 1 - r, "r_succ": 0.0, "r_action": 0.0}}
    rows = [row([1, 2, 4], [1, 0, 1], 0.2), row([4, 2, 1], [1, 0, 1], 0.9)]
    text = credit.page("</title><script>alert(2)</script>", "<b>q</b>", rows, {"algo": "slca"},
                       lambda ids: "".join(pieces[i] for i in ids))
    (tmp_path / "h.html").write_text(text)
    p = dom(str(tmp_path / "h.html"))
    tags = [tag for tag, _ in p.elements]
    assert "script" not in tags and "img" not in tags and "b" not in tags
    assert not any("data-pwned" in a or "onerror" in a for _, a in p.elements)
    assert [s["data-id"] for s in p.cols[(0, "SLCA (Eq. 8)")]] == ["1", "2", "4"]
    assert "&lt;script&gt;document.body" in browse(str(tmp_path / "h.html"), "--dump-dom")
