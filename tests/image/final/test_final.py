"""Checks for the final image: the backend really runs, the tag tells the truth, nothing extra ships."""

import json

import pytest

from torchstack.tags import tag_safe

COMPILERS = ("gcc", "g++", "cc", "c++", "gfortran", "clang", "cpp", "as", "ld")
CONV = (
    "import torch; x = torch.randn(1, 16, 64, 64); conv = torch.nn.Conv2d(16, 32, 3).eval();\n"
    "with torch.inference_mode(): conv(x); conv(x)"
)


def test_torch_version_matches_the_tag(python, ours, labels):
    version = python("import torch; print(torch.__version__)").strip()
    assert version == ours["torch_version"], f"expected torch {ours['torch_version']}, found {version}"
    tag = labels.get("org.opencontainers.image.version", "")
    assert f"-torch-{tag_safe(version)}-" in tag, f"the image's release tag {tag!r} does not name torch {version}"


def test_oci_labels_agree_with_the_tag(labels, ours, image_attrs):
    assert labels.get("org.opencontainers.image.version") == ours["release_tag"], (
        f"label version {labels.get('org.opencontainers.image.version')!r}, build info {ours['release_tag']!r}"
    )
    for name in ("arch", "backend", "target"):
        assert labels.get(f"io.torchstack.{name}") == ours[name], f"label io.torchstack.{name} disagrees with the build"
    for repo_tag in image_attrs.get("RepoTags") or []:
        tag = repo_tag.rsplit(":", 1)[1]
        assert tag == ours["release_tag"] or not tag.startswith("r"), f"{repo_tag} names another release than {ours['release_tag']}"
    assert ours["backend"] in ours["release_tag"], f"release tag {ours['release_tag']} does not name {ours['backend']}"


def test_onednn_availability_is_what_the_backend_promises(python, backend):
    available = python("import torch; print(torch.backends.mkldnn.is_available())").strip()
    assert available == str(backend.mkldnn), f"backend {backend.name}: mkldnn.is_available() should be {backend.mkldnn}, is {available}"


def test_convolution_runs_through_onednn(user_host, backend):
    if not backend.mkldnn:
        pytest.skip(f"backend {backend.name} does not use oneDNN")
    result = user_host.run(f"ONEDNN_VERBOSE=1 python3 -c '{CONV}'")
    assert result.rc == 0, result.stderr[-2000:]
    executed = [line for line in result.stdout.splitlines() if "exec" in line and "convolution" in line]
    assert executed, f"no oneDNN convolution ran; verbose output:\n{result.stdout[-1500:]}"
    if "libarm_compute" in backend.libraries:
        assert any("acl" in line for line in executed), f"oneDNN ran no ACL kernel:\n" + "\n".join(executed[:5])


def test_backend_libraries_are_in_the_image(user_host, backend):
    if not backend.libraries:
        pytest.skip(f"backend {backend.name} names no extra library")
    script = f"{CONV}\nprint(open('/proc/self/maps').read())"
    maps = user_host.run(f"python3 -c {json.dumps(script)}").stdout
    linker_cache = user_host.run("/sbin/ldconfig -p").stdout
    for library in backend.libraries:
        assert library in maps or library in linker_cache, (
            f"{library} is neither loaded by torch nor in the linker cache of the image"
        )


def test_torch_uses_our_blas_and_target_flags(python, ours):
    torch_build = ours["components"]["torch"]
    if torch_build["method"] != "source":
        pytest.skip("torch comes from a prebuilt wheel: its BLAS and flags are upstream's")
    config = python("import torch; print(torch.__config__.show())")
    assert "BLAS_INFO=open" in config, f"torch is not built on OpenBLAS:\n{config}"
    assert ours["target_flag"] in config, f"torch was not compiled with {ours['target_flag']}:\n{config}"


def test_no_compilers(host):
    found = [name for name in COMPILERS if host.exists(name)]
    cc1 = host.run("ls /usr/lib/gcc/*/*/cc1* 2>/dev/null").stdout.split()
    assert not found and not cc1, f"compilers left in the final image: {found + cc1}"


def test_no_headers_sources_or_wheels(host, labels):
    info = json.loads(labels.get("io.torchstack.build-info", "{}"))
    prefixes = " ".join(c["prefix"] for c in info.get("components", {}).values() if c.get("prefix") not in (None, "/usr"))
    leftovers = host.run(
        f"find /usr/include /usr/local/include {prefixes} -name '*.h' 2>/dev/null;"
        "find / -xdev \\( -path /proc -o -path /sys \\) -prune -o "
        "\\( -name '*.whl' -o -name '*.tar.gz' -o -name '*.tar.xz' -o -path '/opt/torchstack/src' \\) -print"
    ).stdout.split()
    assert not leftovers, f"left in the final image: {leftovers[:20]}"


def test_no_pip_and_no_pip_caches(host, user_host):
    assert user_host.run("python3 -m pip --version").rc != 0, "pip is still installed in the final image"
    caches = host.run("ls -d /root/.cache/pip /home/*/.cache/pip /tmp/pip-* 2>/dev/null").stdout.split()
    assert not caches, f"pip caches left: {caches}"


def test_no_extra_ca_bundles(host):
    # A PEM certificate starts with this line; the system store (/etc/ssl, ca-certificates) is allowed.
    found = host.run(
        "grep -rlIx --exclude-dir=proc --exclude-dir=sys --exclude-dir=ssl --exclude-dir=ca-certificates "
        "-e '-----BEGIN CERTIFICATE-----' / 2>/dev/null || true"
    ).stdout.split()
    assert not found, f"certificates outside the system CA store: {found}"


def test_every_example_runs(user_host, ours):
    examples = user_host.run("ls /opt/torchstack/examples/*.py").stdout.split()
    assert examples, "no examples shipped in /opt/torchstack/examples"
    for example in examples:
        result = user_host.run(f"python3 {example}")
        assert result.rc == 0, f"{example} failed:\n{result.stderr[-1500:]}"


def test_image_size_is_within_budget(image_attrs, catalog, ours, stage):
    budget = catalog.stage(stage).size_budget_mib
    if budget is None:
        pytest.skip(f"no size budget for stage {stage}")
    size = image_attrs["Size"] / 2**20
    print(f"image size {size:,.0f} MiB of a {budget:,} MiB budget")
    assert size <= budget, f"the image is {size:,.0f} MiB, over its {budget:,} MiB budget"
