"""Every relative link in README.md and docs/ resolves: the file (or folder) exists, and a #anchor names a
heading of the page it points at (GitHub's slug). Links inside code are not links."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")  # [text](target) and ![alt](target)


def pages():
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def prose(text):
    """The text outside fenced blocks and inline code."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def slug(heading):
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path):
    return {slug(h) for h in re.findall(r"^#{1,6} (.+)$", prose(path.read_text(encoding="utf-8")), flags=re.M)}


def broken(path):
    """The relative links of the markdown file `path` that do not resolve, as 'target: why'."""
    bad = []
    for target in LINK.findall(prose(path.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {dest.name}")
    return bad


def test_every_relative_link_in_the_readme_and_docs_resolves():
    found = {str(p.relative_to(ROOT)): broken(p) for p in pages()}
    assert len(found) > 10 and not {p: b for p, b in found.items() if b}


def test_the_check_finds_a_missing_file_and_a_missing_anchor(tmp_path):
    (tmp_path / "a.md").write_text("# A title, here\n\n## Two\n")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md#a-title-here) [ok](a.md#two) [ok](#mine) `[code](gone.md)` [web](https://x.org)\n\n"
                    "## Mine\n\n[gone](gone.md) [no](a.md#three) ![img](pic.png)\n```\n[fenced](gone2.md)\n```\n")
    assert broken(page) == ["gone.md: no such file", "a.md#three: no heading #three in a.md", "pic.png: no such file"]
