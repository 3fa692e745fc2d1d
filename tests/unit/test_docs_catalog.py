"""The pages' tables of backends and build targets say what the catalog says: each architecture's
backends (its default first) and targets, a target no Debian release here can build marked as not yet
buildable, the targets the pages say need trixie the ones only trixie's GCC knows, and the product
names listed the catalog's aliases of each target. Each check is
also run once on a page changed to break it, so that it is seen to fail."""

from __future__ import annotations

import re

import pytest

from tests.pages import shipped_pages
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
    products = {}
    for line in targets_page.split("\n| name | target | product |\n", 1)[-1].splitlines()[1:]:
        if not line.startswith("|"):
            break
        name, target = (_named(cell)[0] for cell in line.strip("|").split("|")[:2])
        products[name] = target
    aliases = {alias: t.name for t in catalog.targets for alias in t.aliases}
    if products != aliases:
        problems.append(f"{TARGETS_PAGE.name}: the product names listed are {products}, the catalog's aliases {aliases}")
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
        ("targets", "`neoverse-v2`, `neoverse-v3`", "`neoverse-v3`", "said to need trixie"),
        ("targets", "| `graviton5` | `neoverse-v3` |", "| `graviton5` | `neoverse-v2` |", "the product names listed"),
        ("targets", "| `turin` | `znver5` | AMD EPYC 9005 (Zen 5) |\n", "", "the product names listed"),
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


def _pages() -> dict[str, str]:
    # Not the changelog (each release's words of its day), nor the page on adding a torch release to
    # the catalog, which is about one the catalog does not have yet.
    return {str(page.relative_to(ROOT)): page.read_text() for page in shipped_pages("CHANGELOG.md", "docs/maintaining/torch-releases.md")}


def version_problems(catalog: Catalog, pages: dict[str, str]) -> list[str]:
    """Versions the pages name that the catalog does not have: a torch release asked for by option or
    named in a tag (--torch-version V, torch-V-), a torchvision or zentorch release, and a clause that
    pairs a torchvision or zentorch release with a torch release ("zentorch==V for torch T") that the
    catalog does not pair.
    (A torch version a page names otherwise, what a third-party wheel requires, say, is not the
    catalog's to have.)"""
    torch = set(catalog.torch_releases)
    plugins = catalog.plugins
    problems = []
    for name, text in pages.items():
        flat = text.replace("\n", " ")
        for version in re.findall(r"--torch-version[ =](\d+\.\d+\.\d+)|(?<![\w.])torch-(\d+\.\d+\.\d+)-", flat):
            version = next(v for v in version if v)
            if version not in torch:
                problems.append(f"{name}: torch {version} is not a release of the catalog ({', '.join(sorted(torch))})")
        for library in ("torchvision", "zentorch"):
            known = set(plugins[library].versions)
            for version in re.findall(rf"{library}[ =-]+(\d+(?:\.\d+){{2,3}})", flat):
                if version not in known:
                    problems.append(f"{name}: {library} {version} is not one the catalog knows ({', '.join(sorted(known))})")
        for library in ("torchvision", "zentorch"):
            # "LIBRARY V ... torch T" within a clause, no other release of the library between
            pairs = rf"{library}[ =-]+(\d+(?:\.\d+){{2,3}})`?((?:(?!{library}[ =-]+\d)[^.;(]){{0,60}}?)(?<![\w.])`?torch[ =-]+(\d+\.\d+)"
            for version, _, torch_line in re.findall(pairs, flat):
                problems += _pairing_problem(plugins[library], version, torch_line, name)
    return problems


def _pairing_problem(plugin, version: str, torch_line: str, page: str) -> list[str]:
    if plugin.torch_pairing == "version-prefix":
        paired = version.startswith(f"{torch_line}.")
    else:
        paired = torch_line in plugin.torch_lines.get(version, ())
    return [] if paired else [f"{page}: {plugin.name} {version} is paired with torch {torch_line}; the catalog does not pair them"]


def test_the_pages_name_only_versions_and_pairings_the_catalog_has(catalog):
    assert version_problems(catalog, _pages()) == []


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("Build it with `--torch-version 2.11.0`.", "torch 2.11.0 is not a release"),
        ("Its tag is `r26.12-torch-2.11.0-onednn`.", "torch 2.11.0 is not a release"),
        ("PyPI's torchvision 0.27.0 declares it.", "torchvision 0.27.0 is not one"),
        ("torchvision 0.28.0 is the release for torch 2.14.", "torchvision 0.28.0 is paired with torch 2.14"),
        ("zentorch 2.13.0.2 goes with torch 2.14.0.", "zentorch 2.13.0.2 is paired with torch 2.14"),
    ],
)
def test_a_version_or_pairing_the_catalog_lacks_is_found(catalog, text, problem):
    assert any(problem in p for p in version_problems(catalog, {"page.md": text}))
