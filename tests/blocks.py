"""The fenced code blocks of a markdown page as a reader pastes them, for the tests that run them
(tests/test_snippets.py lists which test runs which block): a block found by how it begins, a command line of it
as argv, and the one substitution a test may make (a value of the page replaced by its local stand-in)."""
import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def blocks(page):
    """[(language, text)] of the fenced blocks of `page` (a path from the repository's root), in order."""
    return FENCE.findall((ROOT / page).read_text(encoding="utf-8"))


def block(page, start):
    """The text of the one fenced block of `page` that begins with `start`."""
    found = [text for _, text in blocks(page) if text.startswith(start)]
    assert len(found) == 1, f"{page}: {len(found)} blocks begin with {start!r}"
    return found[0]


def commands(text):
    """The command lines of a shell block, each as argv: backslash continuations joined, comments cut."""
    return [argv for line in text.replace("\\\n", " ").splitlines() if (argv := shlex.split(line, comments=True))]


def command(page, start):
    """argv of the one command line of `page`'s blocks that begins with `start`."""
    found = [argv for _, text in blocks(page) for argv in commands(text) if shlex.join(argv).startswith(start)]
    assert len(found) == 1, f"{page}: {len(found)} command lines begin with {start!r}"
    return found[0]


def substituted(argv, table):
    """argv with each word that is a key of `table` replaced by its value; every key must be there, so a page
    that no longer holds a value the test replaces fails rather than running something else."""
    missing = set(table) - set(argv)
    assert not missing, f"{sorted(missing)} not in {shlex.join(argv)}"
    return [table.get(word, word) for word in argv]
