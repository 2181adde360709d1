"""The README's "Training a real model" block as a new user runs it: `hf download` offline (HF_HUB_OFFLINE=1) on
a Hugging Face cache laid out as the hub lays the dataset repository out (data/*.parquet), built from the
release's preview rows; the headline command, `python train.py --model M`, on those splits, refused in one line
when the offline simulator and judge cannot earn a reward on them, trained when a simulator and a judge are
served (two real HTTP servers on 127.0.0.1); the torchrun line, that command on more processes."""
import fnmatch
import json
import os
import shlex
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from blocks import command, substituted
from helpers import Server, chat, hub_cache, tiny_model, tokenizer
from lib.inputs.data import FETCH, RELEASE_FILES
from test_data import RL_PREVIEW, SFT_PREVIEW, as_conversations

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the paper preset at toy size: a few rows, one RL step, float32 (bf16 on a CPU is slow and adds nothing here)
TINY = ["--dtype", "float32", "--no-grad-ckpt", "--group-size", "2", "--prompts-per-step", "2", "--mini-batch", "2",
        "--micro-batch", "4", "--max-tokens", "24", "--max-turns", "2", "--steps", "1", "--sft-batch", "2",
        "--sft-epochs", "1", "--sft-max-len", "512", "--eval-limit", "2", "--show", "0"]


def parquet(rows):
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(rows), sink)
    return sink.getvalue().to_pybytes()


@pytest.fixture(scope="module")
def headline(tmp_path_factory):
    """(the run's environment: an offline Hugging Face cache holding the release's three splits, a local model folder)."""
    tmp = tmp_path_factory.mktemp("headline")
    rl = [json.loads(x) for x in RL_PREVIEW.read_text(encoding="utf-8").splitlines()]
    sft = [as_conversations(json.loads(x)) for x in SFT_PREVIEW.read_text(encoding="utf-8").splitlines()]
    cache = hub_cache(tmp / "hub", "YanZhanPKU/SLCA-GRPO-Datasets", {
        "data/toucan_toolcall_rl.parquet": parquet(rl), "data/toucan_eval_4k_unified.parquet": parquet(rl),
        "data/toucan_toolcall_sft_split_42k.parquet": parquet(sft), "README.md": b"# the dataset card\n"})
    model = tmp / "model"
    tiny_model().save_pretrained(model)
    tokenizer().save_pretrained(model)
    env = {**os.environ, "HF_HUB_CACHE": cache, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": ROOT}
    return env, str(model), tmp


def train(env, *argv):
    return subprocess.run([sys.executable, "train.py", *argv], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


def test_splits_missing_from_the_cache_name_the_command_that_fetches_them(headline):
    env, model, tmp = headline
    p = train({**env, "HF_HUB_CACHE": str(tmp / "empty")}, "--model", model, "--out", str(tmp / "none"), *TINY)
    assert p.returncode == 2 and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert 'hf download YanZhanPKU/SLCA-GRPO-Datasets --repo-type dataset --include "data/*.parquet"' in p.stderr


def test_offline_replay_and_facts_judge_are_refused_in_one_line(headline):
    env, model, tmp = headline
    p = train(env, "--model", model, "--out", str(tmp / "refused"), *TINY)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    line = p.stderr.strip().splitlines()[-1]
    assert line.startswith("error: no reward can be earned on these rows: the replay simulator has no recorded "
                           "response for the gold calls of 1 of 1 RL rows "
                           "that call tools")
    assert all(f in line for f in ("--sim-url", "--sim-model", "--judge-url", "--judge-model", "--max-unscored"))
    assert not (tmp / "refused").exists()  # nothing written, nothing trained


def test_the_download_line_fills_the_cache_train_py_reads(headline):
    """The README's `hf download` line as written, offline (HF_HUB_OFFLINE=1) on the test's cache: the network's
    part, fetching the files, is the one thing not run. Its pattern names the splits train.py reads from there."""
    env, model, tmp = headline
    argv = command("README.md", "hf download")
    assert argv == shlex.split(FETCH.split(" (")[0])                       # the line train.py's refusal names
    pattern = argv[argv.index("--include") + 1]
    assert all(fnmatch.fnmatch(f, pattern) for f in RELEASE_FILES.values()) and not fnmatch.fnmatch("README.md", pattern)
    hf = os.path.join(os.path.dirname(sys.executable), "hf")              # huggingface_hub's command, beside python
    p = subprocess.run(substituted(argv, {"hf": hf}), env=env, capture_output=True, text=True, timeout=60)
    snapshot = os.path.join(env["HF_HUB_CACHE"], "datasets--YanZhanPKU--SLCA-GRPO-Datasets", "snapshots", "0" * 40)
    assert p.returncode == 0 and snapshot in p.stdout, p.stdout + p.stderr
    assert all(os.path.isfile(os.path.join(snapshot, f)) for f in RELEASE_FILES.values())


def served(reply):
    """A local stand-in for a served LLM: /v1/models names one model (the line names none, so a client asks),
    every chat gets `reply`."""
    return Server(lambda path, body, n: (200, {"data": [{"id": "served"}]} if path == "/v1/models" else chat(reply), 0))


def test_a_served_simulator_and_judge_train_on_the_release_splits(headline):
    """The README's headline line as written, but for the model (a tiny local one), the hosts (local servers) and
    the toy sizes appended."""
    env, model, tmp = headline
    sim, judge = served('<tool_response>{"result": "ok"}</tool_response>'), served("Rating: [[4]]")
    try:
        python, script, *argv = substituted(command("README.md", "python train.py --model"), {
            "Qwen/Qwen2.5-3B-Instruct": model, "http://sim:8003/v1": sim.url + "/v1",
            "http://judge:8016/v1": judge.url + "/v1"})
        assert (python, script) == ("python", "train.py")
        p = train(env, *argv, "--out", str(tmp / "run"), *TINY)
    finally:
        for s in (sim, judge):
            s.httpd.shutdown()
            s.httpd.server_close()
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    config = json.load(open(tmp / "run" / "config.json"))
    snapshot = os.path.join("datasets--YanZhanPKU--SLCA-GRPO-Datasets", "snapshots", "0" * 40, "data")
    assert all(snapshot in config[k] for k in ("data", "eval_data", "sft_data"))
    assert "plan: SFT: 2 conversations x 1 epochs, 2 a step -> RL: 1 steps of 2 prompts x G = 2 " \
           "(2 prompts x 1 epochs) -> eval: 2 prompts before RL, every 50 steps, after RL" in p.stdout
    rows = [json.loads(x) for x in open(tmp / "run" / "metrics.jsonl")]
    [rl] = [r for r in rows if "step" in r]
    assert rl["replay_miss"] == 0.0 and rl["blind_steps"] == 0 and rl["rollout_tok_s"] > 0


def test_the_torchrun_line_is_the_served_command_on_more_processes():
    """The README's torchrun line is the headline line (run above) on 8 processes, a larger model, a checkpoint
    every 10 steps: torchrun of train.py is tests/test_distributed.py's (2 CPU processes); 8 GPUs are not here."""
    one, many = command("README.md", "python train.py --model"), command("README.md", "torchrun")
    assert many == ["torchrun", "--nproc_per_node", "8", *substituted(one[1:], {
        "Qwen/Qwen2.5-3B-Instruct": "Qwen/Qwen2.5-7B-Instruct"}), "--save-every", "10"]
