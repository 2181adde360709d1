"""The layout the README's Layout table promises: the eight modules at the top, imports one way."""
import ast
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOP = {"segment", "rewards", "simulator", "advantage", "loss", "rollout", "train", "eval"}


def imports(path):
    """The first dotted component of every module `path` imports (anywhere in the file)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_the_top_level_is_the_eight_modules():
    assert {p.stem for p in ROOT.glob("*.py")} == TOP


ABOVE = {"bench", "experiments", "tools", "credit", "integrations"}  # the folders that import the method, never imported by it
FOLDERS = {"lib", "bench", "experiments", "tools", "credit"}  # the Python folders; each holds one kind of thing


ROOMS = ["inputs", "training", "sampling", "frozen", "runs"]  # lib/'s rooms; each imports only the rooms before it


def test_lib_imports_no_top_level_module_nor_a_folder_above_it():
    for path in (ROOT / "lib").rglob("*.py"):
        bad = imports(path) & (TOP | ABOVE)
        assert not bad, f"{path.name} imports {sorted(bad)}"


def rooms(path):
    """The lib rooms whose modules `path` imports."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []
        out |= {n.split(".")[1] for n in names if n.startswith("lib.")}
    return out


def test_lib_is_rooms_by_role_each_importing_only_the_rooms_before_it():
    """lib/ holds no module of its own, only the rooms its docstring names, in that order; a room imports
    itself and the rooms before it (inputs, training, sampling, frozen, runs), never one after it."""
    assert sorted(p.name for p in (ROOT / "lib").glob("*.py")) == ["__init__.py"]
    found = sorted(p.name for p in (ROOT / "lib").iterdir() if p.is_dir() and p.name != "__pycache__")
    assert found == sorted(ROOMS)
    assert re.findall(r"^    (\w+)/", (ROOT / "lib" / "__init__.py").read_text(), flags=re.M) == ROOMS
    for i, room in enumerate(ROOMS):
        for path in (ROOT / "lib" / room).glob("*.py"):
            after = rooms(path) - set(ROOMS[:i + 1])
            assert not after, f"lib/{room}/{path.name} imports lib/{sorted(after)}, a room after its own"


def test_no_python_folder_besides_the_named_ones():
    """A new folder of code is named here and in the README's Layout table."""
    found = {p.parent.relative_to(ROOT).parts[0] for p in ROOT.glob("*/*.py")} - {"tests", "data", "configs", "docs"}
    assert found <= FOLDERS | {"integrations"}, sorted(found)


def test_experiments_and_tools_run_as_modules_without_a_path_patch():
    """`python -m experiments.<name>` / `python -m tools.<name>`: no file patches sys.path to find the method."""
    for path in [*(ROOT / "experiments").glob("*.py"), *(ROOT / "tools").glob("*.py"), *(ROOT / "credit").glob("*.py")]:
        assert "sys.path.insert" not in path.read_text(), f"{path.relative_to(ROOT)} patches sys.path"


def test_the_top_level_imports_no_folder_above_it_and_has_no_cycle():
    graph = {m: imports(ROOT / f"{m}.py") for m in TOP}
    for m, deps in graph.items():
        assert not deps & ABOVE, f"{m}.py imports {sorted(deps & ABOVE)}"

    def reach(m, seen):
        for d in graph[m] & TOP:
            if d not in seen:
                seen.add(d)
                reach(d, seen)
        return seen
    for m in TOP:
        assert m not in reach(m, set()), f"{m}.py is in an import cycle"



def test_the_integrations_import_the_top_level_and_nothing_imports_them():
    """integrations/ (verl, TRL) call the reference's functions; only their tests import them."""
    for path in (ROOT / "integrations").glob("*.py"):
        assert not imports(path) & (ABOVE | {"tests"}) - {"integrations"}, f"integrations/{path.name}"
    for path in [*ROOT.glob("*.py"), *[p for d in FOLDERS for p in (ROOT / d).rglob("*.py")]]:
        assert "integrations" not in imports(path), f"{path.relative_to(ROOT)} imports integrations"


def test_the_method_tests_import_no_folder_above_the_method_nor_a_system_test():
    """`-m method` (tests/conftest.py METHOD) runs with requirements.txt alone: what needs the extras stays out."""
    from conftest import METHOD
    system = {p.stem for p in (ROOT / "tests").glob("test_*.py")} - {name[:-3] for name in METHOD}
    for name in METHOD:
        bad = imports(ROOT / "tests" / name) & (system | ABOVE)
        assert not bad, f"{name} imports {sorted(bad)}"

def test_no_citation_points_outside_the_repository():
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    for name in files:
        if name.endswith((".py", ".md")):
            text = (ROOT / name).read_text(encoding="utf-8")
            assert not re.search(r"\bSPEC(\.md)? ?§", text), f"{name} cites the spec, which is not in the repository"
            for section in re.findall(r"docs/method\.md §(\d+)", text):
                assert 1 <= int(section) <= 10, f"{name} cites docs/method.md §{section}"


def test_no_function_over_60_lines_without_a_reason():
    """The style rule: a function over ~60 lines says why in its docstring ("Long because ...")."""
    for path in [*ROOT.glob("*.py"), *(ROOT / "lib").rglob("*.py"), *(ROOT / "bench").glob("*.py"),
                 *(ROOT / "experiments").glob("*.py"), *(ROOT / "tools").glob("*.py"), *(ROOT / "credit").glob("*.py"),
                 *(ROOT / "integrations").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60:
                assert "Long because" in (ast.get_docstring(node) or ""), \
                    f"{path.name}:{node.lineno} {node.name} is {node.end_lineno - node.lineno + 1} lines, no reason given"


MAX_POSITIONAL = 6  # issue 58: past about six, a call reads as a list of values; the rest are keyword-only


def test_no_function_outside_the_tests_takes_more_than_six_positional_parameters():
    """A function takes its data and the settings object it needs (rewards.HierR, advantage.Credit, loss.Clip,
    rollout.Episode, ...); anything past MAX_POSITIONAL positional parameters is keyword-only (after `*`)."""
    bad = []
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in ("tests", "venv", ".venv") or rel.parts[0].startswith("."):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [a.arg for a in node.args.posonlyargs + node.args.args if a.arg not in ("self", "cls")]
                if len(names) > MAX_POSITIONAL:
                    bad.append(f"{rel}:{node.lineno} {node.name}: {len(names)} positional parameters")
    assert not bad, "\n".join(bad)


FLAG_READERS = {  # the command line's own functions: they read parsed flags and make the settings objects from them
    "eval.py": {"check_episode_flags", "frozen_from_flags"},
    "train.py": {"of"},                                   # Settings.of
    "lib/runs/config.py": {"check_bounds", "saved_config", "check_extensions", "check_args", "with_preset",
                           "__call__"},                    # HelpAll, an argparse Action
    "lib/runs/evalcli.py": {"flag", "llm_client", "who", "fingerprint"},
}


def test_only_the_command_lines_own_functions_take_the_parsed_flags():
    """The eight modules and lib/ pass settings objects (train.Settings, rewards.HierR, ...), never the argparse
    namespace: a parameter named `a` or `args` is one of FLAG_READERS' functions."""
    found = {}
    for path in [*ROOT.glob("*.py"), *(ROOT / "lib").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = {x.arg for x in node.args.posonlyargs + node.args.args + node.args.kwonlyargs}
                if names & {"a", "args", "namespace"}:
                    found.setdefault(str(path.relative_to(ROOT)), set()).add(node.name)
    assert found == FLAG_READERS
