"""Every relative link of every Markdown page the repository ships (README, docs/, benchmarks/, the
changelog...) reaches a file that is there, and its #anchor a heading of that page, as GitHub makes
anchors of headings. The check is also run on a page given a broken link and a broken anchor."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.pages import prose, shipped_pages
from torchstack.catalog.model import ROOT

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation but - and _ dropped,
    spaces made -, a repeated one numbered (-1, -2)."""
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", prose(text), re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.replace("`", "").lower()).replace(" ", "-")
        numbered, n = slug, 0
        while numbered in found:
            n += 1
            numbered = f"{slug}-{n}"
        found.add(numbered)
    return found


def link_problems(page: Path, text: str) -> list[str]:
    problems = []
    for target in LINK.findall(prose(text)):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            problems.append(f"{page.relative_to(ROOT)}: {target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked.read_text() if path else text):
            problems.append(f"{page.relative_to(ROOT)}: {target}: no such heading")
    return problems


def test_every_relative_link_and_anchor_resolves():
    pages = shipped_pages()
    assert ROOT / "README.md" in pages and any("maintaining" in str(p) for p in pages)
    problems = [p for page in pages for p in link_problems(page, page.read_text())]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("link", "problem"),
    [
        ("[gone](no-such-page.md)", "no such file"),
        ("[gone](contributing/layout.md#modules)", "no such heading"),
        ("[gone](#no-such-heading)", "no such heading"),
    ],
)
def test_a_broken_link_or_anchor_is_found(link, problem):
    page = ROOT / "docs" / "README.md"
    assert any(problem in p for p in link_problems(page, page.read_text() + f"\n{link}\n"))
