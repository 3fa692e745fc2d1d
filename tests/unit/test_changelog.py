"""CHANGELOG.md keeps the Keep a Changelog form, with one release section per rYY.MM."""

import re
from pathlib import Path

CHANGELOG = Path(__file__).resolve().parents[2] / "CHANGELOG.md"
RELEASE = re.compile(r"## \[(Unreleased|r\d\d\.(0[1-9]|1[0-2]))\]( - \d{4}-\d\d-\d\d)?")
KINDS = ("Added", "Changed", "Deprecated", "Removed", "Fixed", "Security")


def test_the_changelog_has_release_sections_and_kinds_of_change():
    lines = CHANGELOG.read_text().splitlines()
    releases = [line for line in lines if line.startswith("## ")]
    assert releases[0] == "## [Unreleased]", "the first section is Unreleased"
    for line in releases:
        match = RELEASE.fullmatch(line)
        assert match, f"{line!r}: a release section is '## [rYY.MM] - YYYY-MM-DD'"
        assert (match[1] == "Unreleased") != bool(match[3]), f"{line!r}: a release has a date, Unreleased none"
    names = [RELEASE.fullmatch(line)[1] for line in releases[1:]]
    assert names == sorted(set(names), reverse=True), "one section per release, newest first"
    for line in lines:
        if line.startswith("### "):
            assert line[4:] in KINDS, f"{line!r}: a kind of change is one of {', '.join(KINDS)}"
