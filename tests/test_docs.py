"""The README and the manual in ``docs/`` hold together: a short README, and no link that leads
nowhere (every relative link names an existing file, and a heading of it when it has an anchor).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = sorted([README, *DOCS.glob("*.md")])
README_MAX_LINES = 300

FENCE = re.compile(r"^```.*?^```", flags=re.M | re.S)
CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def prose(text: str) -> str:
    """``text`` without fenced blocks and inline code (their brackets are not links)."""
    return CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to ``-``."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file (a repeated heading gets ``-1``, ``-2``...)."""
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6} (.+)$", FENCE.sub("", path.read_text()), flags=re.M):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def relative_links(path: Path) -> list[str]:
    return [
        target for target in LINK.findall(prose(path.read_text()))
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target)
    ]


def broken(path: Path, target: str) -> str | None:
    """Why ``target`` (a link in ``path``) leads nowhere, or None."""
    file, _, anchor = target.partition("#")
    dest = (path.parent / file).resolve() if file else path
    if not dest.exists():
        return f"{target}: no file {dest}"
    if anchor and dest.is_file() and dest.suffix == ".md" and anchor not in anchors(dest):
        return f"{target}: no heading #{anchor} in {dest.name}"
    return None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_somewhere(page: Path) -> None:
    problems = [p for t in relative_links(page) if (p := broken(page, t))]
    assert not problems, problems


def test_the_link_check_catches_a_broken_link(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other\n\n## Resuming a crawl (`JOBDIR`)\n")
    page.write_text(
        "[ok](other.md#resuming-a-crawl-jobdir) [gone](missing.md) [bad](other.md#nope)\n"
        "`[code](missing.md)`\n```text\n[fenced](missing.md)\n```\n[web](https://example.com/x)\n"
    )
    targets = relative_links(page)
    assert targets == ["other.md#resuming-a-crawl-jobdir", "missing.md", "other.md#nope"]
    assert [broken(page, t) is None for t in targets] == [True, False, False]


def test_the_readme_stays_short() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines < README_MAX_LINES, f"README.md has {lines} lines; the manual is in docs/"


def test_the_manual_index_lists_every_page_and_the_readme_links_it() -> None:
    index = DOCS / "README.md"
    listed = {t.partition("#")[0] for t in relative_links(index)}
    pages = {p.name for p in DOCS.glob("*.md")} - {"README.md"}
    assert pages <= listed, f"docs/README.md does not list {sorted(pages - listed)}"
    from_readme = {t.partition("#")[0] for t in relative_links(README)}
    assert {f"docs/{p}" for p in pages} <= from_readme | {"docs/README.md"}
    assert "docs/README.md" in from_readme
