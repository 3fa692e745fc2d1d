"""A third kind of engine, with no Docker client at all: its images, containers and pushes kept in
memory, each operation recorded. What it needed to carry a build, a push and the checks is what
docs/contributing/layout.md lists under "What a third engine adds"; tests/unit/test_third_engine.py
drives the toolkit through it."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace

from torchstack.base import sharing
from torchstack.engines.buildjob import BuildJob, BuildResult
from torchstack.engines.engine import Builder, CommandFailed, Engine, EngineRefused, Image, NoSuchImage


@dataclass
class Store:
    """What the engine holds: images by ID, names to IDs, containers, a registry's pushed names, each call."""

    images: dict[str, Image] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)
    files: dict[str, dict[str, list[bytes]]] = field(default_factory=dict)  # image ID -> path -> contents
    containers: dict[str, dict[str, str]] = field(default_factory=dict)  # container ID -> labels
    registry: dict[str, str] = field(default_factory=dict)  # a pushed REPOSITORY:TAG -> image ID
    outputs: dict[str, bytes] = field(default_factory=dict)  # a command's first word -> what it prints
    failing: dict[str, tuple[int, bytes]] = field(default_factory=dict)  # a command's first word -> its exit, stderr
    calls: list[str] = field(default_factory=list)

    def add(self, name: str, labels: Mapping[str, str] | None = None, **facts) -> Image:
        """An image under `name`, its ID its labels' and name's digest (as a store's is its configuration's)."""
        digest = hashlib.sha256(json.dumps([name, dict(labels or {})], sort_keys=True).encode()).hexdigest()
        image = Image(id=f"sha256:{digest}", labels=dict(labels or {}), **{"size": 1, "architecture": "amd64", **facts})
        self.images[image.id] = image
        self.names[name] = image.id
        return image


class MemoryBuilder(Builder):
    """Builds an image from a job without running a step: its tag, its labels; cached when the same job
    was built before."""

    name = "memory"
    mounts_secrets = True

    def build(self, job: BuildJob) -> BuildResult:
        store: Store = self.engine.held
        store.calls.append(f"build {job.tag or job.stage}")
        known = job.tag in store.names
        image = store.add(job.tag or f"untagged:{job.stage}", job.labels)
        return BuildResult(image.id, 0.0, cached=known, ran=())


@dataclass(frozen=True)
class MemoryEngine(Engine):
    """An engine kind of its own (`--engine memory`), with no Docker API: every operation on `held`."""

    held: Store = field(default_factory=Store, compare=False, kw_only=True)  # what it holds (Engine.store is its image store's name)
    cli = "memory"

    @classmethod
    def names_itself(cls, version: dict) -> bool:
        return version.get("Platform", {}).get("Name") == "memory"

    def _id(self, name: str) -> str:
        if name in self.held.images:
            return name
        if name not in self.held.names:
            raise NoSuchImage(f"{name}: no such image here")
        return self.held.names[name]

    def image(self, name: str) -> Image:
        self.held.calls.append(f"image {name}")
        found = self.held.images[self._id(name)]
        return replace(found, tags=tuple(n for n, i in self.held.names.items() if i == found.id))

    def pull(self, reference: str, platform: str | None = None) -> str | None:
        self.held.calls.append(f"pull {reference}")
        if reference not in self.held.registry:
            return "not found"
        self.held.names[reference] = self.held.registry[reference]
        return None

    def tag(self, image: str, name: str) -> None:
        self.held.calls.append(f"tag {image} {name}")
        self.held.names[name] = self._id(image)

    def remove_image(self, name: str, prune: bool = False) -> bool:
        self.held.calls.append(f"remove {name}")
        return self.held.names.pop(name, None) is not None

    def images_named(self, repository: str) -> list[Image]:
        return [self.image(n) for n in self.held.names if n.rpartition(":")[0] == repository]

    def save(self, image: str) -> Iterator[bytes]:
        self.held.calls.append(f"save {image}")
        yield self._id(image).encode()

    def push(self, repository: str, tag: str) -> Iterator[dict]:
        name = f"{repository}:{tag}"
        self.held.calls.append(f"push {name}")
        if name not in self.held.names:
            raise EngineRefused(f"{name}: no such image")
        self.held.registry[name] = self.held.names[name]
        yield {"status": "Pushed", "id": "layer"}
        yield {"status": f"{tag}: digest: {self.held.names[name]} size: 1"}

    def output_of(self, image: str, command: list[str], stderr: bool = False, **options) -> bytes:
        self.held.calls.append(f"run {image} {command[0]}")
        self._id(image)
        if command[0] in self.held.failing:
            code, said = self.held.failing[command[0]]
            raise CommandFailed(image, command, code, said)
        return self.held.outputs.get(command[0], b"")

    def files_of(self, image: str, paths: list[str]) -> dict[str, list[bytes]]:
        held = self.held.files.get(self._id(image), {})
        return {path: held[path] for path in paths if path in held}

    def containers_labelled(self, label: str) -> list[tuple[str, Mapping[str, str]]]:
        key, _, value = label.partition("=")
        return [(i, labels) for i, labels in self.held.containers.items() if key in labels and (not value or labels[key] == value)]

    def remove_container(self, container_id: str) -> None:
        self.held.calls.append(f"remove container {container_id}")
        self.held.containers.pop(container_id, None)

    def leave_container(self, who: str | None = None) -> str:
        """A container of owner `who` (this run's by default), as a check run leaves one."""
        container_id = f"c{len(self.held.containers)}"
        self.held.containers[container_id] = {sharing.LABEL: who or sharing.owner()}
        return container_id

    # What each kind answers in its own way.

    def builder_word(self, compiles_torch: bool, buildx_installed: Callable[[], bool], released: Callable[[], Engine]) -> str:
        return "docker"

    def builder(self, wanted: str, buildx_builder: str | None = None) -> Builder:
        return MemoryBuilder(None, self)

    def login_hint(self, host: str) -> str:
        return f"log in to {host} in memory"

    def tls_hint(self, host: str) -> str:
        return f"trust {host} in memory"

    def unreachable(self, exc: Exception) -> str:
        return f"no memory engine at {self.url}"


def memory_engine(**held) -> MemoryEngine:
    """A connected memory engine, as connection.connect would give one."""
    return MemoryEngine("memory", "memory://", "a test's", version="1.0", held=Store(**held))
