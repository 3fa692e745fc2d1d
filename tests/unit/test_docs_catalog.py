"""The pages' tables of backends and build targets say what the catalog says: each architecture's
backends (its default first) and targets, a target no Debian release here can build marked as not yet
buildable, and the targets the pages say need trixie the ones only trixie's GCC knows. Each check is
also run once on a page changed to break it, so that it is seen to fail."""

from __future__ import annotations

import re

import pytest

from torchstack.catalog.model import ROOT, Catalog, load_catalog
from torchstack.request.selection import distributions_for

README = ROOT / "README.md"
TARGETS_PAGE = ROOT / "docs" / "using" / "targets-and-backends.md"
NOT_YET = "not yet buildable"


def _rows(text: str, heading: str) -> dict[str, list[str]]:
    """The cells of the table under `heading`, by the first cell (an architecture)."""
    section = text.split(f"\n{heading}\n", 1)[1]
    rows = {}
    for line in section.splitlines():
        if rows and not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("|") and cells[0] not in ("architecture", "---"):
            rows[cells[0]] = cells[1:]
    return rows


def _named(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def _target_problems(catalog: Catalog, arch: str, cell: str, where: str) -> list[str]:
    problems = []
    listed = set(_named(cell.split("|")[0]))
    known = {t.name for t in catalog.targets_for(arch)}
    if listed != known:
        problems.append(f"{where}: {arch} lists {sorted(listed)}, the catalog has {sorted(known)}")
    for target in catalog.targets_for(arch):
        marked = re.search(rf"`{re.escape(target.name)}` \({NOT_YET}: needs GCC {re.escape(target.gcc)}\)", cell)
        if not distributions_for(catalog, target) and not marked:
            problems.append(f"{where}: {target.name} is listed as buildable; no release here has GCC {target.gcc}")
        if distributions_for(catalog, target) and marked:
            problems.append(f"{where}: {target.name} is marked {NOT_YET}, and builds on a release here")
    return problems


def table_problems(catalog: Catalog, readme: str, targets_page: str) -> list[str]:
    """What the two pages' tables say that the catalog does not."""
    problems = []
    readme_rows = _rows(readme, "## Backends by architecture")
    page_rows = _rows(targets_page, "## Build targets")
    for arch_name, arch in catalog.architectures.items():
        if arch_name not in readme_rows or arch_name not in page_rows:
            problems.append(f"{arch_name}: missing from a table")
            continue
        backends, targets = readme_rows[arch_name]
        others = sorted(b.name for b in catalog.backends.values() if arch_name in b.arches and b.name != arch.default_backend)
        expected = [arch.default_backend, *others]
        if _named(backends)[:1] != expected[:1] or sorted(_named(backends)) != sorted(expected):
            problems.append(f"README.md: {arch_name}'s backends are {_named(backends)}, the catalog's {expected} (default first)")
        problems += _target_problems(catalog, arch_name, targets, "README.md")
        problems += _target_problems(catalog, arch_name, page_rows[arch_name][0], TARGETS_PAGE.name)
    said = re.search(r"does not know: (.*?) need\s+trixie", targets_page, re.DOTALL)
    trixie_only = {t.name for t in catalog.targets if [d.name for d in distributions_for(catalog, t)] == ["trixie"]}
    if not said or set(_named(said[1])) != trixie_only:
        problems.append(f"{TARGETS_PAGE.name}: the targets said to need trixie are not {sorted(trixie_only)}")
    return problems


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def test_the_pages_tables_say_what_the_catalog_says(catalog):
    assert table_problems(catalog, README.read_text(), TARGETS_PAGE.read_text()) == []


@pytest.mark.parametrize(
    ("page", "old", "new", "problem"),
    [
        ("readme", "; `z17` (not yet buildable: needs GCC 15.1)", ", `z17`", "z17 is listed as buildable"),
        ("readme", "`generic`, `z14`, `z15`, `z16`;", "`generic`, `z14`, `z15`;", "s390x lists"),
        ("readme", "| `onednn`, `zendnn`, `openblas` |", "| `zendnn`, `onednn`, `openblas` |", "x86_64's backends"),
        ("targets", "; `z17` (not yet buildable: needs GCC 15.1)", ", `z17`", "z17 is listed as buildable"),
        ("targets", "`neoverse-v2`, `znver4` and `znver5` need", "`znver4` and `znver5` need", "said to need trixie"),
    ],
)
def test_each_check_fails_on_a_page_that_breaks_it(catalog, page, old, new, problem):
    readme, targets_page = README.read_text(), TARGETS_PAGE.read_text()
    if page == "readme":
        assert old in readme
        readme = readme.replace(old, new)
    else:
        assert old in targets_page
        targets_page = targets_page.replace(old, new)
    assert any(problem in p for p in table_problems(catalog, readme, targets_page))
