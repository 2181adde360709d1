"""Small shared fixtures: a tokenizer and a tiny Qwen2 built locally (no downloads), the one
growth check of every linear-time test (`linear`), and a real HTTP server on 127.0.0.1 (`Server`)."""
import functools
import gc
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from lib.inputs.chat import with_tools
from lib.training import tiny
from lib.training.precision import native_bf16

CORPUS = ['{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}',
          "The weather in Paris is 21 degrees and sunny. The answer is 42.",
          '<tool_call>\n[{"name": "f", "arguments": {"x": 1}}]\n</tool_call>',
          '<tool_response>\n{"temp": 21}\n</tool_response>'] * 20

MB = 1_000_000
# the faster compute dtype for a real model's tests here: bf16 where the CPU has it (2.2x float32's
# speed on the AVX512 machine), float32 where torch emulates bf16 (7x slower on an AVX2-only one)
DTYPE = "bfloat16" if native_bf16() else "float32"


def cpu(f, args):
    """CPU seconds per call of f(*args), and its result: after one call to warm up, the best of
    3 runs of k calls (k doubles until a run takes 10 ms, so the clock's jitter does not time a
    microsecond call), with the garbage collector off (its passes over every live object would
    make the time of allocating n objects grow faster than n)."""
    out, k, runs = f(*args), 1, []
    gc.disable()
    try:
        while len(runs) < 3:
            t = time.process_time()
            for _ in range(k):
                f(*args)
            dt = time.process_time() - t
            if dt < 0.01:
                k, runs = 2 * k, []
            else:
                runs.append(dt / k)
    finally:
        gc.enable()
    return min(runs), out


def linear(f, make, n=MB // 4, like=None):
    """f(*make(4 * n)), asserting that its CPU time grows linearly: at 4n under 10 times that at
    n (linear code takes about 4 times, up to 7 where the larger input no longer fits the CPU's
    cache; quadratic 16). A ratio of two times on one machine, never an absolute bound: a busy
    machine slows both sizes alike. A ratio over 10 is timed once more before it fails (a burst of
    load during one size); quadratic code fails both times.

    `like`, a function of the same arguments known to be linear (a copy of the input), makes the
    bound relative: f's ratio under 2.5 times like's, timed alongside. For inputs of tens of MB,
    where the memory system alone can make a copy's ratio 14 (fresh pages from the kernel)."""
    for last in (False, True):
        small, _ = cpu(f, make(n))
        big, out = cpu(f, make(4 * n))
        bound = 10
        if like is not None:
            base_small, base_big = cpu(like, make(n))[0], cpu(like, make(4 * n))[0]
            bound = 2.5 * base_big / base_small
        if big < bound * small:
            return out
        assert not last, f"{getattr(f, '__name__', f)}: {big:.4f} s at 4n, {small:.4f} s at n (bound {bound:.1f}x)"


@functools.lru_cache(maxsize=None)
def tokenizer():
    """One tokenizer shared by every test of a process: copy it before changing it."""
    return tiny.build_tokenizer(CORPUS, vocab_size=400)


def tiny_model(seed=0):
    return tiny.build_model(tokenizer(), seed=seed, hidden=32, layers=1, heads=2).eval()


def verl_row(question, gold, responses, facts=(), tools=None):
    """One RL row in the release's verl layout."""
    tools = tools or [{"type": "function", "function": {"name": "f", "description": "F.", "parameters": {
        "type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}}}]
    return {"prompt": [{"role": "system", "content": "Call tools."}, {"role": "user", "content": question}],
            "tools": json.dumps(tools),
            "reward_model": {"ground_truth": {"allowed_tools": [t["function"]["name"] for t in tools],
                                              "gold_tool_calls": json.dumps(gold), "question_content": question,
                                              "subset_name": "tool_call", "reference_facts": list(facts)}},
            "extra_info": {"parallel_type": "single_step_single_tool", "tool_responses": responses}}


CALL = '<tool_call>\n[{"name": "f", "arguments": {"x": 1}}]\n</tool_call>'


def write_jsonl(path, rows):
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return str(path)


def write_world(folder, n_rl=4, n_sft=8):
    """A small RL file and SFT file of one tool, f(x) -> 42: (rl path, sft path)."""
    gold = [[{"name": "f", "arguments": {"x": 1}}]]
    resp = [{"name": "f", "arguments": {"x": 1}, "response": '{"y": 42}'}]
    rl = write_jsonl(folder / "rl.jsonl", [verl_row(f"What is f of 1, case {i}?", gold, resp, ["42"])
                                            for i in range(n_rl)])
    sft = write_jsonl(folder / "sft.jsonl", [{"conversations": [
        {"from": "system", "value": "Call tools."}, {"from": "human", "value": f"What is f of 1, case {i}?"},
        {"from": "gpt", "value": CALL}, {"from": "human", "value": '<tool_response>\n{"y": 42}\n</tool_response>'},
        {"from": "gpt", "value": "f of 1 is 42."}]} for i in range(n_sft)])
    return rl, sft


def write_caller_sft(path, n=8):
    """SFT conversations on write_world's RL prompts as the policy sees them (their system text lists the tool):
    a tiny policy trained on them calls f(x) -> 42 and sums up, often but not always. Returns the path."""
    system = with_tools([{"role": "system", "content": "Call tools."}], json.loads(verl_row("q", [], [])["tools"]))
    return write_jsonl(path, [{"conversations": [
        {"from": "system", "value": system[0]["content"]}, {"from": "human", "value": f"What is f of 1, case {i}?"},
        {"from": "gpt", "value": CALL}, {"from": "human", "value": '<tool_response>\n{"y": 42}\n</tool_response>'},
        {"from": "gpt", "value": "f of 1 is 42."}]} for i in range(n)])


def hub_cache(root, repo, files, repo_type="dataset", revision="0" * 40):
    """A Hugging Face cache under `root` holding `files` ({path in the repository: bytes}) of `repo`, laid
    out as huggingface_hub lays a download out: blobs named by their sha256, snapshots/<revision>/<path>
    as relative links to them, refs/main naming the revision. Returns the cache folder (HF_HUB_CACHE)."""
    import hashlib
    import os
    folder = root / f"{repo_type}s--{repo.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(revision)
    (folder / "blobs").mkdir()
    for path, data in files.items():
        blob = folder / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = folder / "snapshots" / revision / path
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(blob, link.parent), link)
    return str(root)


def chat(text):
    return {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}


class Server:
    """Serves plan(path, body, n) -> (status, payload, delay) for request n (1-based)."""

    def __init__(self, plan):
        self.plan, self.requests, self.lock = plan, [], threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                outer.serve(self, None)

            def do_POST(self):
                outer.serve(self, json.loads(self.rfile.read(int(self.headers["Content-Length"]))))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    def serve(self, handler, body):
        with self.lock:
            self.requests.append((handler.path, body, handler.headers.get("Authorization")))
            n = len(self.requests)
        status, payload, delay = self.plan(handler.path, body, n)
        time.sleep(delay)
        if callable(payload):  # writes the whole response itself
            try:
                return payload(handler)
            except OSError:
                return None
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        except OSError:  # the client timed out and left
            pass

    def posts(self):
        return [r for r in self.requests if r[0] == "/v1/chat/completions"]
