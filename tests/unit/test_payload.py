"""What ships in the final image: every runtime library a source build needs is copied into the
final stage and put on the loader's path, for every allowed backend x target x distribution."""

import dataclasses
import fnmatch
import re
import shutil

import pytest

from tests.conftest import NOW
from torchstack.base.errors import DataError
from torchstack.base.layout import LD_SO_CONF, PAYLOAD_DIR
from torchstack.catalog.model import DATA, load_catalog
from torchstack.making.render import render_dockerfile
from torchstack.request.plan import Request
from torchstack.request.planner import make_plan
from torchstack.request.selection import combinations


def needed_libraries(plan) -> set[str]:
    """What torch built here loads at run time, said independently of components.yaml's `ships`:
    the backend's libraries (backends.yaml), and OpenBLAS when it is compiled rather than Debian's."""
    needed = set(plan.backend.libraries)
    if plan.component("openblas") and plan.component("openblas").method == "source":
        needed.add("libopenblas")
    return needed


def unshipped(plan) -> list[str]:
    """The needed libraries the rendered stages leave out: not staged by the libs stage (with the
    folder they are loaded from), not copied into the final stage, or off its loader's path."""
    final = plan.stage("final")
    libs, dockerfile = render_dockerfile(plan, plan.stage("libs")), render_dockerfile(plan, final)
    staged = re.findall(rf"cp -a (.+) {re.escape(PAYLOAD_DIR)}(\S+)/ \\$", libs, re.MULTILINE)
    copies_payload = f"COPY --from={final.copies['libs']} {PAYLOAD_DIR}/ /" in dockerfile.splitlines()
    loader = re.search(rf"^RUN printf '%s\\n' (.+) > {re.escape(LD_SO_CONF)} && ldconfig$", dockerfile, re.MULTILINE)
    on_path = loader[1].split() if loader else []
    problems = []
    for library in sorted(needed_libraries(plan)):
        places = [
            folder
            for sources, folder in staged
            for source in sources.split()
            if source.startswith(f"{folder}/") and fnmatch.fnmatchcase(f"{library}.so", source.rsplit("/", 1)[1])
        ]
        if not places:
            problems.append(f"{library} is not staged for the final image")
        elif not copies_payload:
            problems.append(f"the final stage does not copy {PAYLOAD_DIR} (with {library})")
        elif not set(places) & set(on_path):
            problems.append(f"{library}'s folder {places} is not in {LD_SO_CONF} ({on_path})")
    return problems


def test_every_source_built_runtime_library_ships_with_its_loader_path(catalog):
    checked = 0
    for backend, target, distribution in combinations(catalog):
        plan = make_plan(
            catalog, Request(backend=backend.name, arch=target.arch, build_target=target.name, distribution=distribution.name, now=NOW)
        )
        assert needed_libraries(plan), f"{backend.name}: expected at least one library of our own"
        problems = unshipped(plan)
        assert not problems, f"{backend.name} for {target.name} on {distribution.name}: {'; '.join(problems)}"
        checked += 1
    assert checked > 30, f"only {checked} combinations"


def test_the_check_fails_when_the_data_drops_a_library(plan_for):
    """ACL's libraries left out of the payload (what issue 10 found): the check above says so."""
    plan = plan_for(backend="onednn-acl", build_target="neoverse-v1")
    assert unshipped(plan) == []
    acl = plan.component("acl")
    dropped = dataclasses.replace(acl, ships=())
    components = tuple(dropped if c is acl else c for c in plan.components)
    stages = tuple(dataclasses.replace(s, components=tuple(dropped if c is acl else c for c in s.components)) for s in plan.stages)
    broken = dataclasses.replace(
        plan,
        components=components,
        stages=stages,
        payload=dataclasses.replace(plan.payload, libraries=tuple(lib for lib in plan.payload.libraries if lib.component != "acl")),
    )
    assert unshipped(broken) == ["libarm_compute is not staged for the final image"]


def test_the_catalog_refuses_a_backend_library_no_component_ships(tmp_path):
    data = tmp_path / "data"
    shutil.copytree(DATA, data)
    text = (data / "components.yaml").read_text().replace('ships: ["build/libarm_compute*.so*"]', "ships: []")
    (data / "components.yaml").write_text(text)
    with pytest.raises(DataError, match="backend onednn-acl: library libarm_compute is in libraries but no component"):
        load_catalog(data)


def test_a_prebuilt_torch_ships_no_acl_of_ours(plan_for):
    """A torch wheel carries its own ACL (torch.libs); the plan then builds and ships none."""
    plan = plan_for(backend="onednn-acl", methods={"torch": "wheel"}, torch_wheel="index")
    assert plan.component("acl") is None
    assert [lib.component for lib in plan.payload.libraries] == ["openblas"]


def test_the_payload_is_what_the_build_info_says(plan_for):
    from torchstack.request.metadata import build_info

    plan = plan_for(backend="onednn-acl", build_target="neoverse-v2", distribution="trixie")
    payload = build_info(plan)["payload"]
    assert payload["libraries"] == [
        {"component": "openblas", "directory": "/opt/openblas/lib", "patterns": ["libopenblas*.so*"]},
        {"component": "acl", "directory": "/opt/acl/build", "patterns": ["libarm_compute*.so*"]},
    ]
    assert "libgfortran5" in payload["packages"] and "libtcmalloc-minimal4" in payload["packages"]
