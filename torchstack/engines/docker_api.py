"""What an engine that speaks Docker's API does for the toolkit, through the Docker SDK: images, containers, pushes."""

from __future__ import annotations

import contextlib
import io
import tarfile
from collections.abc import Iterator, Mapping

import docker
import docker.errors

from torchstack.base import sharing
from torchstack.engines.engine import CommandFailed, EngineRefused, Image, NoSuchImage

# What the SDK raises when an engine fails: callers outside engines/ name it through this.
FAILURES = (docker.errors.DockerException,)


def _words(exc: Exception) -> str:
    """An SDK error in one line: the engine's explanation where it gave one."""
    text = getattr(exc, "explanation", None) or str(exc)
    return " ".join(str(text).split())[:300]


def _image(found) -> Image:
    attrs = found.attrs
    return Image(
        id=found.id,
        tags=tuple(found.tags),
        labels=dict(found.labels or {}),
        size=int(attrs.get("Size", 0) or 0),
        architecture=str(attrs.get("Architecture") or ""),
        created=str(attrs.get("Created") or ""),
        config=dict(attrs.get("Config") or {}),
    )


class DockerApi:
    """The operations of an engine of Docker's API (Docker's, Podman's service), on its SDK client
    (`sdk`, which connection.connect gives the engine). Each turns the SDK's errors into the
    engine's (engine.NoSuchImage, EngineRefused, CommandFailed)."""

    def _client(self) -> docker.DockerClient:
        if self.sdk is None:  # an engine as chosen (connection.choose), not yet connected
            raise EngineRefused(f"the engine at {self.url} is not connected")
        return self.sdk

    def image(self, name: str) -> Image:
        try:
            return _image(self._client().images.get(name))
        except docker.errors.ImageNotFound:
            raise NoSuchImage(f"{name}: no such image here ({self.cli} pull it first)") from None
        except docker.errors.APIError as exc:
            raise EngineRefused(f"the engine at {self.url} did not say what {name} is: {_words(exc)}") from None

    def pull(self, reference: str, platform: str | None = None) -> str | None:
        try:
            self._client().images.pull(reference, platform=platform)
        except (docker.errors.APIError, docker.errors.ImageNotFound) as exc:
            return _words(exc)[:200]
        return None

    def tag(self, image: str, name: str) -> None:
        repository, _, tag = name.rpartition(":")
        try:
            self._client().images.get(image).tag(repository, tag)
        except docker.errors.ImageNotFound:
            raise NoSuchImage(f"{image}: no such image here") from None
        except docker.errors.APIError as exc:
            raise EngineRefused(f"tagging {image} as {name} failed: {_words(exc)}") from None

    def remove_image(self, name: str, prune: bool = False) -> bool:
        try:
            self._client().images.remove(name, noprune=not prune)
        except docker.errors.APIError:  # ImageNotFound among them; or an image a container still uses
            return False
        return True

    def images_named(self, repository: str) -> list[Image]:
        """The images of `repository`, as the engine lists them (not each asked for again: one another
        run removes in between is not missed as an error)."""
        listed = self._client().api.images(name=repository)
        return [Image(id=i.get("Id", ""), tags=tuple(i.get("RepoTags") or ()), labels=dict(i.get("Labels") or {})) for i in listed]

    def save(self, image: str) -> Iterator[bytes]:
        try:
            yield from self._client().images.get(image).save(named=False)
        except docker.errors.APIError as exc:
            raise EngineRefused(f"exporting {image} failed: {_words(exc)}") from None

    def push(self, repository: str, tag: str) -> Iterator[dict]:
        try:
            yield from self._client().api.push(repository, tag=tag, stream=True, decode=True)
        except docker.errors.APIError as exc:
            raise EngineRefused(_words(exc)) from None

    def output_of(self, image: str, command: list[str], stderr: bool = False, **options) -> bytes:
        """Read once the container has ended, not followed while it runs as the SDK's `containers.run`
        does: Podman 5's API often answers such a follower of a container that ended at once with nothing."""
        container = self._client().containers.create(image, command, labels=sharing.labels(), **options)
        try:
            container.start()
            code = container.wait()["StatusCode"]
            if code != 0:
                raise CommandFailed(image, command, code, container.logs(stdout=False, stderr=True))
            return container.logs(stdout=True, stderr=stderr)
        finally:
            container.remove(force=True)

    def files_of(self, image: str, paths: list[str]) -> dict[str, list[bytes]]:
        """Read from a container that is made, never started, and removed after."""
        container = self._client().containers.create(image, entrypoint=["/bin/true"], command=[], labels=sharing.labels())
        found = {}
        try:
            for path in paths:
                try:
                    stream, _ = container.get_archive(path)
                except docker.errors.NotFound:
                    continue
                with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as archive:
                    found[path] = [archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()]
        finally:
            container.remove(force=True)
        return found

    def containers_labelled(self, label: str) -> list[tuple[str, Mapping[str, str]]]:
        """Each container (running or not) that carries `label` (NAME or NAME=VALUE): its ID, its labels.
        As the engine lists them: one another run removes meanwhile is not asked for again."""
        listed = self._client().api.containers(all=True, filters={"label": label})
        return [(c.get("Id", ""), dict(c.get("Labels") or {})) for c in listed]

    def remove_container(self, container_id: str) -> None:
        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
            self._client().api.remove_container(container_id, force=True)
