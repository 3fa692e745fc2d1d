"""The session's end judges only what the session made (tests/session.py): another build's
containers, image names and temporary files on the same host neither fail it nor are touched."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import uuid

import docker
import pytest

from tests import session
from torchstack.base import sharing

pytestmark = pytest.mark.engine


def test_what_others_run_on_the_host_is_not_the_sessions_but_its_own_is(client, x86_build):
    image = x86_build["final_image"]
    others = docker.from_env()  # not the session's client: no label of the session's
    name = f"foreign-{uuid.uuid4().hex[:8]}"
    made = []
    theirs = tempfile.mkdtemp(prefix="foreign-", dir="/var/tmp")
    try:
        # Another run's container (a live owner of this host: process 1), one with no owner, an
        # image name and a temporary folder of theirs.
        made.append(others.containers.run(image, ["sleep", "infinity"], detach=True, labels={sharing.LABEL: sharing.identity(1)}))
        made.append(others.containers.run(image, ["sleep", "infinity"], detach=True, name=name))
        others.images.get(image).tag("torchstack-foreign", name)
        left = session.leftovers()
        assert not any(name in entry or theirs in entry for entries in left.values() for entry in entries), left
        assert not [c for c in left.get("containers", ()) if c.split()[0] in {m.short_id for m in made}], left
        # The session's own container is found: the check can fail.
        ours = client.containers.run(image, ["sleep", "infinity"], detach=True)
        made.append(ours)
        assert any(entry.startswith(ours.short_id) for entry in session.leftovers().get("containers", ())), session.leftovers()
    finally:
        for container in made:
            container.remove(force=True)
        with contextlib.suppress(docker.errors.ImageNotFound):
            others.images.remove(f"torchstack-foreign:{name}")
        shutil.rmtree(theirs, ignore_errors=True)
