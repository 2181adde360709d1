"""The README's install lines give every module of the project what it imports, and CI installs them into a
virtual environment of its own (.ci/run), so a missing install step fails there.

Importing each module in a fresh interpreter runs its imports' own imports too: a package that one of the
extras needs but installs without its dependencies (verl, tensordict: requirements-integrations.txt) is found
missing here, not skipped as the plug-ins' tests would skip it."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FOLDERS = ("lib", *(f"lib/{r}" for r in ("inputs", "training", "sampling", "frozen", "runs")), "bench", "credit",
           "experiments", "integrations", "tools")  # tests/ and data/ are not imported
SCRIPTS = {"integrations.trl_example"}  # runs when imported: tests/test_snippets.py runs it


def modules():
    """Every module of the project outside tests/, as a dotted name."""
    names = [f[:-3] for f in os.listdir(ROOT) if f.endswith(".py")]
    for d in FOLDERS:
        names += [d.replace("/", ".") + ("" if f == "__init__.py" else f".{f[:-3]}")
                  for f in os.listdir(os.path.join(ROOT, d)) if f.endswith(".py")]
    return sorted(set(names) - SCRIPTS)


def test_every_module_imports():
    code = ("import importlib, sys\nfor m in sys.argv[1:]:\n    try: importlib.import_module(m)\n"
            "    except Exception as e: print(f'{m}: {type(e).__name__}: {e}')")
    r = subprocess.run([sys.executable, "-c", code, *modules()], cwd=ROOT, capture_output=True, text=True,
                       env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout == "", "modules that do not import after the README's install lines:\n" + r.stdout


def test_ci_installs_into_an_environment_of_its_own():
    """.ci/run makes a virtual environment, activates it, and only then installs and tests (its command is the
    README's: tests/test_snippets.py)."""
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        ci = [line.strip() for line in f if not line.startswith("#")]
    made = next(i for i, line in enumerate(ci) if re.match(r"python3 -m venv ", line))
    activated = next(i for i, line in enumerate(ci) if re.match(r'\. "\$venv/bin/activate"', line))
    assert made < activated < len(ci) - 1 and ci[-1].startswith("pip install -r requirements.txt")
    assert not any("pip install" in line for line in ci[:activated]), "every install goes into the new environment"
