"""Every reference a reader follows points at something that exists, in every tracked .py, .md, .toml and .txt:

- a repository path (`lib/training/tiny.py`, `docs/`, `configs/*.toml`) is a tracked file, a folder or a glob that matches;
- a section named in quotes after a file (`README "Method"`, `docs/training.md "Presets"`) begins one of that
  file's headings, bold run-in heads or paragraphs;
- `docs/x.md §n` (and the `§m` that follow it, and a bare `§n` inside docs/method.md) is a numbered heading there;
- `Eq. n` is one of the README's numbered equations;
- a module's name (`segment.decision_mask`, `lib.sampling.sampler.draw`) in prose, a comment or a string is defined there;
- a `--flag` after `train.py` or `eval.py` (in the same code span or command) is one of that command's flags, and
  any other `--flag` is defined by some parser in the repository, or is one of another tool's (EXTERNAL).
Relative markdown links `[x](path)` are tests/test_links.py's. Paths resolve against the tree as it is.
"""
import ast
import fnmatch
import io
import re
import subprocess
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TRACKED = set(subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split())
FILES = sorted(f for f in TRACKED if f.endswith((".py", ".md", ".toml", ".txt")) and (ROOT / f).exists()
               and f != "tests/test_references.py"  # this file: its patterns and examples are no references
               and not fnmatch.fnmatch(f, "docs/experiments/*/*"))  # an experiment's reports, kept as written then
FOLDERS = {str(Path(f).parents[i]) for f in TRACKED for i in range(len(Path(f).parents) - 1)}
TOP = sorted({f.split("/")[0] for f in TRACKED if "/" in f})  # the repository's top folders
ELSEWHERE = {  # paths of other repositories, cited as such (fnmatch patterns)
    "data/*.parquet": "the release's Hugging Face dataset, YanZhanPKU/SLCA-GRPO-Datasets (docs/method.md §8)",
    "data/toucan_*.parquet": "the same dataset's files",
    "data/samples*": "the release's repository, SLCA-GRPO/SLCA-GRPO (tests/fixtures holds rows copied from it)",
    "tools/call_frequency": "a metric TRL's GRPOTrainer logs (tools/vs_trl.py reads it)",
}
MOVED = {  # paths of earlier commits: a page of docs/experiments/ says where its verbatim quote's paths are now
    "scripts/*": "experiments/ and tools/", "docs/diagnostic*": "docs/experiments/", "docs/smol*": "docs/experiments/",
}
EXTERNAL = {  # flags of other tools, by the tool that takes them
    "pip": "--no-deps --dry-run",
    "torchrun": "--nproc_per_node --nproc-per-node --nnodes --node_rank --rdzv_backend --rdzv_endpoint --standalone",
    "hf download": "--repo-type --include --local-dir",
    "vllm serve": "--served-model-name --port --tensor-parallel-size --enable-expert-parallel --max-model-len "
                  "--enable-prefix-caching",
    "tensorboard": "--logdir",
    "chromium": "--headless --dump-dom --no-sandbox --disable-gpu --screenshot --window-size",
    "git": "--short",
    "pytest-xdist": "--dist --no-loadscope-reorder",
    "mount": "--bind",
    "python -m verl.trainer.main_ppo (Hydra)": "--config-path --config-name",
    "tests/test_resume.py": "--gone",  # a flag of a saved config that the parser no longer has, on purpose
}
EXTERNAL_FLAGS = {flag for flags in EXTERNAL.values() for flag in flags.split()}


def text_of(f):
    """The file's text with markdown link targets `](...)` removed (tests/test_links.py checks those), and in a
    page of docs/experiments/ its quoted lines blank: pre-registrations quoted verbatim from an earlier commit."""
    text = re.sub(r"\]\([^)]*\)", "]", (ROOT / f).read_text(errors="replace"))
    if fnmatch.fnmatch(f, "docs/experiments/*.md"):
        text = re.sub(r"(?m)^>.*$", "", text)
    return text


def where(f, text, pos):
    return f"{f}:{text.count(chr(10), 0, pos) + 1}"


# ---------------------------------------------------------------------------------------------
# paths
PATH = re.compile(r"(?<![\w./-])((?:%s)/[\w.*<>/-]*)" % "|".join(re.escape(t) for t in TOP))


def resolves(path):
    path = path.rstrip(".,:;/")
    if path in TRACKED or path in FOLDERS or any(fnmatch.fnmatch(path, p) for p in ELSEWHERE):
        return True
    module, _, name = path.rpartition(".")
    if module + ".py" in TRACKED:                                       # lib/training/precision.autocast: a name in it
        return name in top_names(module + ".py")
    pattern = re.sub(r"<[^>]*>|\b[A-Z]{2,}\b", "*", path)       # <name>, NAME: a placeholder
    return "*" in pattern and any(fnmatch.fnmatch(f, pattern) or fnmatch.fnmatch(f, pattern + "/*") for f in TRACKED)


def top_names(f):
    """The names a module defines at its top level."""
    tree = ast.parse((ROOT / f).read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            names |= {n.id for t in getattr(node, "targets", [getattr(node, "target", None)]) for n in ast.walk(t)
                      if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def methods(f):
    """The names the classes of a module define (a parameter named after its class: `simulator.respond`)."""
    return {n.name for c in ast.parse((ROOT / f).read_text()).body if isinstance(c, ast.ClassDef)
            for n in c.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def prose(f):
    """(line, text) of what a reader reads: a .py file's comments and strings, any other file's lines."""
    text = (ROOT / f).read_text()
    if not f.endswith(".py"):
        return list(enumerate(text.splitlines(), 1))
    return [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(text).readline)
            if t.type in (tokenize.COMMENT, tokenize.STRING)]


MODULES = {f[:-3].replace("/", "."): f for f in TRACKED if f.endswith(".py")}
NAMED = re.compile(r"(?<![\w./-])((?:%s)\.\w+|%s)\.([A-Za-z_]\w*)" % (
    "|".join(t for t in TOP if t.isidentifier()), "|".join(m for m in MODULES if "." not in m)))
SUFFIXES = {"py", "md", "json", "jsonl", "toml", "txt", "png", "parquet", "gguf", "html"}  # train.py, eval.jsonl: files


def test_every_cited_module_name_exists():
    bad = [f"{f}:{n}: {m.group(0)}" for f in FILES for n, text in prose(f) for m in NAMED.finditer(text)
           if m.group(1) in MODULES and m.group(2) not in SUFFIXES
           and m.group(2) not in top_names(MODULES[m.group(1)]) | methods(MODULES[m.group(1)])]
    assert not bad, "names their module does not define:\n" + "\n".join(bad)


def test_every_cited_path_exists():
    bad = [f"{where(f, t, m.start())}: {m.group(1)}" for f in FILES for t in [text_of(f)]
           for m in PATH.finditer(t) if not t.startswith("\\", m.end()) and not resolves(m.group(1))
           and not (f.startswith("docs/experiments/") and any(fnmatch.fnmatch(m.group(1), p) for p in MOVED))]
    assert not bad, "paths that are not in the repository:\n" + "\n".join(bad)


# ---------------------------------------------------------------------------------------------
# sections
def markdown(name, cited_in):
    """The markdown file a citation names: README (the top one), docs/x.md, or x.md beside the citing file,
    else in docs/."""
    name = "README.md" if name == "README" else name
    for candidate in (name, str(Path(cited_in).parent / name), f"docs/{name}"):
        if candidate in TRACKED:
            return candidate
    return None


def heads(md):
    """What a section name may begin: each heading (its number dropped), bold run-in head and paragraph."""
    text = (ROOT / md).read_text()
    out = [re.sub(r"^[\d.]+\s+", "", h) for h in re.findall(r"(?m)^#+ (.+)$", text)]
    out += re.findall(r"\*\*([^*]+)\*\*", text)
    out += re.findall(r"(?m)^(?:- )?([A-Z][^\n]+)$", text)
    return [" ".join(h.replace("`", "").split()) for h in out]


SECTION = re.compile(r"(README|(?:[\w-]+/)*[\w-]+\.md)(?:'s)?(?: §[\d.]+)?,? \"([^\"\n]{3,80})\"")


def test_every_cited_section_exists():
    bad = []
    for f in FILES:
        text = text_of(f)
        for m in SECTION.finditer(text):
            md, name = markdown(m.group(1), f), " ".join(m.group(2).split())
            if md is None:
                bad.append(f"{where(f, text, m.start())}: {m.group(1)} is no file")
            elif not any(h.startswith(name) for h in heads(md)):
                bad.append(f"{where(f, text, m.start())}: {md} has no section {name!r}")
    assert not bad, "\n".join(bad)


def numbered(md):
    """The section numbers of md's numbered headings: '## 3. X' gives 3, '### 3.1 Y' gives 3.1."""
    return set(re.findall(r"(?m)^#+ (\d+(?:\.\d+)*)\.?\s", (ROOT / md).read_text()))


CITE = re.compile(r"((?:[\w-]+/)*[\w-]+\.md)((?:(?:,? §| §|-)\d+(?:\.\d+)*)+)")


def test_every_cited_section_number_exists():
    bad = []
    for f in FILES:
        text = text_of(f)
        cites = [(m.start(), m.group(1), re.findall(r"\d+(?:\.\d+)*", m.group(2))) for m in CITE.finditer(text)]
        if f == "docs/method.md":                                      # its own, bare
            cites += [(m.start(), f, [m.group(1)]) for m in re.finditer(r"(?<![\w.])§(\d+(?:\.\d+)*)", text)]
        for pos, name, numbers in cites:
            md = markdown(name, f)
            have = numbered(md) if md else set()
            bad += [f"{where(f, text, pos)}: {name} §{n}" for n in numbers if n not in have]
    assert not bad, "sections that are not there:\n" + "\n".join(bad)


def test_every_cited_equation_is_numbered_in_the_readme():
    eqs = set(re.findall(r"(?m)^ {4}\((\d+)\)", (ROOT / "README.md").read_text()))
    bad = []
    for f in FILES:
        text = text_of(f)
        for m in re.finditer(r"\bEqs?\. (\d+)(?:(?:-|–|, | and )(\d+))*", text):
            bad += [f"{where(f, text, m.start())}: Eq. {n}" for n in re.findall(r"\d+", m.group(0)) if n not in eqs]
    assert not bad, "\n".join(bad)


# ---------------------------------------------------------------------------------------------
# flags
def defined_flags():
    """Every --flag some parser of the repository defines by hand (add_argument's literal or f-string names, their
    --no- twins), read from the source, so an experiment's or a tool's parser counts without running it; the flags
    made from settings fields (lib/runs/config.py flags) are the built parsers'."""
    flags = set()
    for f in (f for f in TRACKED if f.endswith(".py")):
        for node in ast.walk(ast.parse((ROOT / f).read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and str(arg.value).startswith("--"):
                        flags.add(arg.value)
                    elif isinstance(arg, ast.JoinedStr):                 # f"--{role}-url"
                        flags |= {ast.unparse(arg)[2:-1].replace("{role}", r) for r in ("sim", "judge", "agent", "user")}
                if any(isinstance(k.value, ast.Attribute) and k.value.attr == "BooleanOptionalAction"
                       for k in node.keywords):
                    flags |= {"--no-" + a.value[2:] for a in node.args if isinstance(a, ast.Constant)}
    return flags


def parser_flags(get_args, argv):
    """The flags of the parser (and its subparsers) that get_args(argv) builds."""
    import argparse
    seen = []
    real = argparse.ArgumentParser.parse_args

    def grab(self, *a, **k):
        seen.append(self)
        raise SystemExit(0)
    argparse.ArgumentParser.parse_args = grab
    try:
        with pytest.raises(SystemExit):
            get_args(argv)
    finally:
        argparse.ArgumentParser.parse_args = real
    flags, todo = set(), list(seen)
    while todo:
        p = todo.pop()
        for a in p._actions:
            flags |= set(a.option_strings)
            if isinstance(a, argparse._SubParsersAction):
                todo += list(a.choices.values())
    return flags


FLAG = re.compile(r"(?<![\w-])--[a-z][\w-]*")
COMMAND = re.compile(r"\b(train|eval)\.py\b([^`\n]*)")


def test_every_cited_flag_exists():
    import eval as evaluate
    import train
    import bench.__main__ as bench
    own = {"train": parser_flags(train.get_args, []), "eval": parser_flags(evaluate.get_args, [])}
    known = defined_flags() | own["train"] | own["eval"] | parser_flags(bench.get_args, []) | {"--help"}  # the made ones
    assert "--sim-url" in own["train"] and "--sim-url" in own["eval"] and "--judge-noise" in known
    bad = []
    for f in FILES:
        text = text_of(f)
        for m in FLAG.finditer(text):
            flag = m.group(0)
            if text.startswith("*", m.end()):                                # --sim-*: a family
                ok = any(k.startswith(flag) for k in known)
            else:
                ok = flag in known or flag in EXTERNAL_FLAGS
            if not ok:
                bad.append(f"{where(f, text, m.start())}: {flag} is no flag of this repository")
        for m in COMMAND.finditer(text):
            tail = re.split(r"[;|(]|&&| \d+\)| and | or ", m.group(2))[0]   # the command's own words
            for flag in (x.group(0) for x in FLAG.finditer(tail) if not tail.startswith("*", x.end())):
                if flag not in own[m.group(1)]:
                    bad.append(f"{where(f, text, m.start())}: {m.group(1)}.py has no {flag}")
    assert not bad, "\n".join(bad)
