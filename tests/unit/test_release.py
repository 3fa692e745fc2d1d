"""The release image's records say what it holds: each component's version as dpkg or the venv
reads it, never a pin the image does not use (Debian's OpenBLAS is Debian's version)."""

from torchstack.making.release import confirmed
from torchstack.request.metadata import build_info

FOUND = {
    "python": [["numpy", "2.3.5", None], ["torch", "2.13.0+cpu", "BSD-3-Clause"]],
    "debian": [["libopenblas0-openmp", "0.3.21+ds-4", "amd64", "openblas"], ["zlib1g", "1:1.2.13.dfsg-1", "amd64", "zlib"]],
}


def test_a_debian_component_is_recorded_at_the_version_dpkg_reads(plan_for):
    plan = plan_for(methods={"openblas": "distro"}, release="r26.11")
    info = build_info(plan)
    assert info["components"]["openblas"]["version"] is None  # nothing is known of it before the image
    found = confirmed(info, FOUND)["components"]
    assert found["openblas"]["version"] == "0.3.21+ds-4"
    assert found["openblas"]["debian_packages"] == {"libopenblas0-openmp": "0.3.21+ds-4"}
    assert found["torch"]["version"] == "2.13.0+cpu" and found["numpy"]["version"] == "2.3.5"
