"""The README is a front door (issue 31): at most 150 lines, and every relative link in it and
in the pages it leads to points at a file that exists and, with an anchor, at a heading there.

Anchors follow GitHub's rule: the heading in lower case, punctuation other than '-' and '_'
dropped, each space a '-', and '-1', '-2', ... after repeated headings.
"""

import re
from pathlib import Path

import pytest
from helpers import ROOT

README_MAX_LINES = 150

#: The pages whose links are checked: the README, the docs, and the other READMEs they lead to.
PAGES = sorted(
    {ROOT / "README.md", ROOT / "config" / "README.md", ROOT / "results" / "README.md"}
    | set((ROOT / "docs").glob("*.md"))
    | set((ROOT / "examples").glob("**/README.md"))
)

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
# [text](target) and ![alt](target), with an optional "title"; the text may hold `code`.
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"`[^`]*`")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced and indented code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced and not line.startswith("    "):
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in prose_lines(page.read_text()):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def links(page: Path) -> list[str]:
    found = []
    for line in prose_lines(page.read_text()):
        # Links inside code spans are text, not links; code inside a link's text is fine.
        for match in LINK.finditer(line):
            inside_code = any(
                span.start() < match.start() < span.end() for span in CODE_SPAN.finditer(line)
            )
            if not inside_code:
                found.append(match.group(1))
    return found


def broken_links(page: Path) -> list[str]:
    problems = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        name = f"{page.relative_to(ROOT)}: {target}"
        if not dest.exists():
            problems.append(f"{name}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{name}: no heading with anchor #{anchor}")
    return problems


def test_readme_is_a_front_door():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"


def test_ci_runs_the_readmes_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert re.search(r"^make test\b", readme, re.M), "README.md shows no `make test`"
    assert "make test" in [line.strip() for line in ci], ".ci/run does not run `make test`"


def test_readme_links_every_docs_page():
    linked = {Path(t.partition("#")[0]).name for t in links(ROOT / "README.md")}
    missing = [p.name for p in sorted((ROOT / "docs").glob("*.md")) if p.name not in linked]
    assert not missing, f"README.md links no {missing}"


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_relative_links_resolve(page):
    assert broken_links(page) == []


def test_the_checker_sees_a_broken_file_and_anchor(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    (tmp_path / "other.md").write_text("# Other page\n\n## Wall time (s): 5 %\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n[ok](other.md#wall-time-s-5-) [ok](#page) `[code](nowhere.md)`\n"
        "[gone](missing.md) [bad anchor](other.md#wall-time)\n\n```\n[fenced](nowhere.md)\n```\n"
    )
    assert broken_links(page) == [
        "page.md: missing.md: no such file",
        "page.md: other.md#wall-time: no heading with anchor #wall-time",
    ]
