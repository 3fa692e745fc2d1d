"""Release tags: the documented scheme, valid Docker tags, and never the same name for two builds."""

import itertools

import pytest

from tests.conftest import NOW
from torchstack.base.errors import UsageProblem
from torchstack.request.tags import check_repository, check_tag, default_release, release_tag


def test_the_canonical_tag():
    assert release_tag("r26.11", "2.13.0", "onednn-acl") == "r26.11-torch-2.13.0-onednn-acl"


def test_the_cpu_local_version_is_left_out_of_the_tag():
    """Every image is a CPU build: `-cpu-` beside the backend would read as part of it."""
    assert release_tag("r26.11", "2.13.0+cpu", "onednn") == "r26.11-torch-2.13.0-onednn"


def test_another_local_version_stays_with_the_version():
    """A wheel built with its own local label is another build: it keeps a name of its own."""
    tag = release_tag("r26.11", "2.13.0+git1a2b", "onednn")
    assert tag == "r26.11-torch-2.13.0.git1a2b-onednn" and tag != release_tag("r26.11", "2.13.0+cpu", "onednn")


def test_a_release_tag_longer_than_docker_allows_asks_for_a_tag():
    """Several plugins can make the generated name too long: the message names the way out."""
    with pytest.raises(UsageProblem, match="more than Docker's 128: name the image with --tag"):
        release_tag("r26.11", "2.13.0", "zendnn", tuple(f"plugin-{n}-1.0.0" for n in range(10)))


def test_default_release_is_the_current_utc_month():
    assert default_release(NOW) == "r26.11"


@pytest.mark.parametrize("bad", ["-leading-dash", ".dot", "has space", "x" * 129, "plus+sign"])
def test_invalid_tags_are_refused(bad):
    with pytest.raises(UsageProblem):
        check_tag(bad)


@pytest.mark.parametrize("good", ["torchstack", "registry.local:5000/ml/torch", "localhost/torch", "a/b-c_d"])
def test_valid_repositories(good):
    assert check_repository(good) == good


@pytest.mark.parametrize("bad", ["Torchstack", "a//b", "trailing-"])
def test_invalid_repositories(bad):
    with pytest.raises(UsageProblem):
        check_repository(bad)


def test_the_default_build_of_a_backend_has_the_canonical_tag(plan_for):
    plan = plan_for(backend="onednn-acl")
    assert plan.release_tag == "r26.11-torch-2.13.0-onednn-acl"


def test_every_distinct_build_gets_a_distinct_tag(catalog, plan_for):
    """Backend x architecture x target x component provenance: no two plans share a tag."""
    seen: dict[str, tuple] = {}
    for backend in catalog.backends.values():
        for arch in backend.arches:
            alternatives = [
                [(name, m) for m in catalog.components[name].methods]
                for name in backend.components
                if catalog.components[name].alternatives
            ]
            combinations = itertools.product(catalog.targets_for(arch), catalog.distributions, *alternatives)
            for target, distribution, *methods in combinations:
                choice = dict(methods)
                if choice.get("torch") == "wheel":
                    continue  # a wheel's own version decides its tag; covered by the wheel tests
                try:
                    plan = plan_for(backend=backend.name, arch=arch, build_target=target.name, methods=choice, distribution=distribution)
                except UsageProblem:
                    continue  # a combination refused with a reason (e.g. GCC too old for the target)
                key = (backend.name, arch, target.name, tuple(sorted(choice.items())), distribution)
                assert seen.setdefault(plan.release_tag, key) == key, f"{key} and {seen[plan.release_tag]} share {plan.release_tag}"
    assert len(seen) > 100
