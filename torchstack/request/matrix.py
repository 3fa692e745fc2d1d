"""The CI build matrix: every build the rules allow, as one job on a native runner of its architecture."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import datetime

import yaml

from torchstack.base.errors import UsageProblem
from torchstack.catalog.model import Catalog
from torchstack.request.plan import Request
from torchstack.request.planner import make_plan
from torchstack.request.selection import combinations

FORMATS = ("github", "gitlab", "json")


@dataclass(frozen=True)
class Job:
    """One build of the matrix: what to pass to ./build.py, where it runs, what tag it makes."""

    name: str
    arch: str
    backend: str
    target: str
    distribution: str
    runs_on: list[str]  # GitHub Actions runner labels
    gitlab_tags: list[str]  # GitLab runner tags
    runner: str  # "hosted", or why the job needs a self-hosted runner with the target's CPU
    args: str  # the ./build.py arguments, one string
    tag: str  # the release tag the job produces


Filters = dict[str, "str | tuple[str, ...] | None"]


def jobs(
    catalog: Catalog,
    filters: Filters,
    torch_from: str | tuple[str, ...] = "source",
    release: str | None = None,
    now: datetime | None = None,
    hosted: bool = False,
) -> list[Job]:
    """The allowed builds that match every given filter (arch, backend, target, distribution), for
    each way of getting torch asked for (source, wheel: one or several). A filter is one value or
    several (any of them); None or () lets everything through. With more than one torch source,
    each job's name ends with its own ("... torch-wheel"), so that the names stay apart. `hosted`:
    only the jobs the architecture's hosted runners can run (no target `runners` of its own)."""
    given = {key: (value,) if isinstance(value, str) else tuple(value or ()) for key, value in filters.items()}
    _check_filters(catalog, given)
    sources = (torch_from,) if isinstance(torch_from, str) else tuple(dict.fromkeys(torch_from))
    found = [job for source in sources for job in _jobs_from(catalog, given, source, release, now, named=len(sources) > 1)]
    if hosted:
        found = [job for job in found if job.runner == "hosted"]
    if not found:
        said = " ".join(f"--{k.replace('target', 'build-target')} {v}" for k, values in given.items() for v in values)
        said += " --hosted" if hosted else ""
        raise UsageProblem(f"no allowed build matches {said or 'the catalog'} (torch from {' or '.join(sources)})")
    return found


def _jobs_from(
    catalog: Catalog, given: dict[str, tuple[str, ...]], torch_from: str, release: str | None, now: datetime | None, named: bool
) -> list[Job]:
    """The jobs of one way of getting torch; `named`: the job names say which."""
    found = []
    methods = {} if torch_from == "source" else {"torch": torch_from}
    for backend, target, distribution in combinations(catalog, torch_from):
        names = {
            "arch": (target.arch,),
            "backend": (backend.name,),
            "target": (target.name, *target.aliases),
            "distribution": (distribution.name,),
        }
        if any(given.get(key) and not set(given[key]) & set(values) for key, values in names.items()):
            continue
        plan = make_plan(
            catalog,
            Request(
                backend=backend.name,
                arch=target.arch,
                build_target=target.name,
                distribution=distribution.name,
                methods=methods,
                torch_wheel="index" if torch_from == "wheel" else None,
                release=release,
                now=now,
            ),
        )
        args = ["--backend", backend.name, "--build-target", target.name, "--distribution", distribution.name]
        if torch_from != "source":
            args += ["--torch-from", torch_from, "--torch-wheel", "index"]
        runners = target.runners or catalog.architectures[target.arch].runners
        found.append(
            Job(
                name=f"{backend.name} {target.name} {distribution.name}" + (f" torch-{torch_from}" if named else ""),
                arch=target.arch,
                backend=backend.name,
                target=target.name,
                distribution=distribution.name,
                runs_on=list(runners.github),
                gitlab_tags=list(runners.gitlab),
                runner=f"self-hosted: {target.runners.why}" if target.runners else "hosted",
                args=" ".join(args),
                tag=plan.release_tag,
            )
        )
    return found


def render(found: list[Job], form: str) -> str:
    """The matrix as GitHub's strategy.matrix (include), GitLab's parallel:matrix, or plain JSON."""
    if form == "github":
        return json.dumps({"include": [asdict(job) for job in found]}, indent=None)
    if form == "gitlab":
        entries = [
            {
                "ARCH": j.arch,
                "BACKEND": j.backend,
                "TARGET": j.target,
                "DISTRIBUTION": j.distribution,
                "BUILD_ARGS": j.args,
                "RUNNER": j.gitlab_tags[0],
                "TAG": j.tag,
            }
            for j in found
        ]
        return yaml.safe_dump({"parallel": {"matrix": entries}}, sort_keys=False, width=200)
    return json.dumps([asdict(job) for job in found], indent=2)


def _check_filters(catalog: Catalog, filters: dict[str, tuple[str, ...]]) -> None:
    valid = {
        "arch": sorted(catalog.architectures),
        "backend": sorted(catalog.backends),
        "target": catalog.target_names(),
        "distribution": sorted(catalog.distributions),
    }
    for key, values in filters.items():
        for value in values:
            if value not in valid[key]:
                raise UsageProblem(f"unknown --{key.replace('target', 'build-target')} {value!r}; valid: {', '.join(valid[key])}")
