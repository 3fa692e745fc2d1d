"""Air-gapped pip: build steps take Python packages from the index given by --pip-index-url (here a
local folder served over loopback, as a site mirror would be), and its address stays out of the image."""

from __future__ import annotations

import functools
import http.server
import threading

import pytest

from tests.engine.conftest import bridge_address, files_holding, numpy_wheel
from tests.engine.images import CA_BUNDLE, X86_DISTRIBUTION, run_build_py

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def local_index(tmp_path_factory):
    """A PEP 503 index of one project, numpy, as a plain folder (a directory listing is a simple page)."""
    root = tmp_path_factory.mktemp("index")
    project = root / "simple" / "numpy"
    project.mkdir(parents=True)
    numpy_wheel(project)
    return root


@pytest.fixture
def serve(client, local_index, unique_tag):
    """Serve the index on the engine's bridge gateway, where build steps reach this host, under a
    path unique to the test (so its URL has never been built with); the paths asked for."""
    asked: list[str] = []
    (local_index / unique_tag).symlink_to(local_index / "simple", target_is_directory=True)

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format, *args):
            asked.append(self.path)

    gateway = bridge_address(client.networks.get("bridge").attrs)
    server = http.server.ThreadingHTTPServer((gateway, 0), functools.partial(Handler, directory=str(local_index)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://{gateway}:{server.server_address[1]}/{unique_tag}/", asked
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("builder", ["docker", pytest.param("buildx", marks=pytest.mark.buildkit)])
def test_pip_takes_packages_from_the_given_index_and_ships_no_trace_of_it(client, serve, unique_tag, builder, repo_copy):
    url, asked = serve
    # The legacy builder copies the pip configuration into the build, so a URL never used before
    # misses its cache. BuildKit keys its cache on the Dockerfile, not on a secret's contents: a
    # step unique to this run, first in the tools stage, makes the pip step after it run and ask
    # this index. Not --no-cache, for either builder: the duplicate base and libs images it makes
    # win the next build's cache lookup, and that build's tools stage misses its cache and compiles
    # numpy again (BuildKit's next tools build did, a minute of every CI run).
    if builder == "buildx":
        template = repo_copy / "templates" / "tools.Dockerfile.j2"
        template.write_text(template.read_text().replace("{{ common.fetch(", f"RUN echo {unique_tag}\n{{{{ common.fetch(", 1))
    result = run_build_py(
        "--build-type",
        "tools",
        *X86_DISTRIBUTION,
        "--openblas-from",
        "distro",
        "--numpy-from",
        "wheel",
        "--builder",
        builder,
        "--ca-bundle",
        str(CA_BUNDLE),
        "--pip-index-url",
        url,
        "--tag",
        unique_tag,
        cwd=repo_copy,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"/{unique_tag}/numpy/" in asked and any(path.endswith(".whl") for path in asked), asked

    image = client.images.get(f"torchstack-tools:{unique_tag}")
    assert not any(var.startswith("PIP_") for var in image.attrs["Config"]["Env"] or [])
    history = " ".join(step.get("CreatedBy", "") for step in image.history())
    assert url not in history and "pip.conf" not in history
    assert files_holding(image, url.encode()) == []
