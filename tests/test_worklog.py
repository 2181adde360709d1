"""README.md and docs/ speak of the project, not of the work that made it: no "this session", "the next
session", "a later session", no "a session here lasts ...". A reader needs the command, the machine, the
commit and how to resume a long run instead. (A process's session, as in setsid, is not a work log.)"""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKLOG = re.compile(r"\b(?:this|that|the next|next|a later|later|an earlier|earlier|previous|each|one|every)\s+"
                     r"(?:work\s+)?sessions?\b|\bsessions?\s+(?:here|lasts?|ends?)\b", re.I)


def worklog(text):
    """The work-log phrases in `text`."""
    return [m.group(0) for m in WORKLOG.finditer(text)]


def test_the_readme_and_docs_hold_no_work_log():
    found = {}
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if hits := worklog(line):
                found[f"{path.relative_to(ROOT)}:{n}"] = hits
    assert not found


def test_the_phrases_are_caught_and_a_process_session_is_not():
    text = ("What a later session runs. A session here lasts 3 hours, so the next session merges it; "
            "this session's suite. torchrun starts each worker in a session of its own.")
    assert worklog(text) == ["a later session", "session here", "the next session", "this session"]
