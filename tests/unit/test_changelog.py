"""CHANGELOG.md keeps the Keep a Changelog form, with one release section per rYY.MM: a title and an
intro, Unreleased first, then the releases newest first, each with its kinds of change at most once
and in Keep a Changelog's order, one single-line bullet per change, and no commit ids."""

import re
from pathlib import Path

CHANGELOG = Path(__file__).resolve().parents[2] / "CHANGELOG.md"
RELEASE = re.compile(r"## \[(Unreleased|r\d\d\.(0[1-9]|1[0-2]))\]( - (\d{4}-\d\d-\d\d))?")
KINDS = ("Added", "Changed", "Deprecated", "Removed", "Fixed", "Security")
# A git commit id as people paste it: 7 to 40 hex digits, at least one letter and one digit among them.
COMMIT_ID = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b")


def lines() -> list[str]:
    return CHANGELOG.read_text().splitlines()


def sections() -> dict[str, list[str]]:
    """Each `## ` heading with the lines under it, up to the next."""
    found: dict[str, list[str]] = {}
    current = None
    for line in lines():
        if line.startswith("## "):
            current = line
            found[current] = []
        elif current is not None:
            found[current].append(line)
    return found


def test_the_changelog_has_a_title_and_an_intro():
    text = lines()
    assert text[0] == "# Changelog", "the first line is the title"
    intro = [line for line in text[1 : text.index("## [Unreleased]")] if line.strip()]
    assert intro, "a short intro between the title and the first section"


def test_the_changelog_has_release_sections_and_kinds_of_change():
    releases = list(sections())
    assert releases[0] == "## [Unreleased]", "the first section is Unreleased"
    for line in releases:
        match = RELEASE.fullmatch(line)
        assert match, f"{line!r}: a release section is '## [rYY.MM] - YYYY-MM-DD'"
        assert (match[1] == "Unreleased") != bool(match[3]), f"{line!r}: a release has a date, Unreleased none"
    names = [RELEASE.fullmatch(line)[1] for line in releases[1:]]
    assert names == sorted(set(names), reverse=True), "one section per release, newest first"
    dates = [RELEASE.fullmatch(line)[4] for line in releases[1:]]
    assert dates == sorted(dates, reverse=True), "release dates descend"
    for line in lines():
        if line.startswith("### "):
            assert line[4:] in KINDS, f"{line!r}: a kind of change is one of {', '.join(KINDS)}"


def test_each_release_has_each_kind_at_most_once_in_keep_a_changelogs_order():
    for release, body in sections().items():
        kinds = [line[4:] for line in body if line.startswith("### ")]
        assert len(kinds) == len(set(kinds)), f"{release}: a kind appears twice: {kinds}"
        assert kinds == sorted(kinds, key=KINDS.index), f"{release}: kinds in the order {', '.join(KINDS)}, not {kinds}"


def test_every_change_is_one_single_line_bullet_under_a_kind():
    for release, body in sections().items():
        kind = None
        for line in body:
            if line.startswith("### "):
                kind = line
                continue
            if not line.strip():
                continue
            assert line.startswith("- ") and not line.startswith("- - "), (
                f"{release}: {line!r}: every change is one line starting '- ' (no continuation lines, no nested bullets)"
            )
            assert kind, f"{release}: {line!r}: a change sits under a kind (### Added, ...)"
            assert line[2:].strip(), f"{release}: an empty bullet"
        kinds = [line for line in body if line.startswith("### ")]
        for heading in kinds:
            start = body.index(heading) + 1
            following = next((line for line in body[start:] if line.strip()), "")
            assert following.startswith("- "), f"{release}: {heading!r} has no changes under it"


def test_the_changelog_names_no_commit_ids():
    found = [(number, m[0]) for number, line in enumerate(lines(), 1) for m in COMMIT_ID.finditer(line)]
    assert not found, f"commit ids (the changelog says what changed for users, not which commit): {found}"
