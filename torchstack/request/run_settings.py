"""How one build runs, where its images go: the settings the command line reads once, typed, for the pipeline."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

# Layer compressions a push can write. gzip: every engine and node pulls it. zstd: smaller, and
# unpacked in a fraction of the time, but pulled only by containerd 1.5+ (Kubernetes nodes), Docker
# 23+, Podman, CRI-O; Docker 20.10 (Debian bookworm's docker.io) cannot pull it.
COMPRESSIONS = ("gzip", "zstd")
# Indexes a push can add for nodes that start an image before its pull ends (lazy.py). soci: AWS's
# SOCI index, an artifact beside the unchanged image, for containerd's SOCI snapshotter.
LAZY_FORMATS = ("soci",)
# The signature forms --sign makes: "both" is each form the host's cosign makes (publishing/cosign.py).
SIGNATURE_FORMATS = ("both", "bundle", "legacy")


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """The build's own options (`build_options` and `--engine`); what it builds is the Request."""

    engine: str = "auto"
    no_cache: bool = False
    dry_run: bool = False
    no_test: bool = False
    recheck: bool = False
    quiet: bool = False
    json_file: Path | None = None
    ca_bundle: Path | None = None
    pip_index_url: str | None = None
    buildx_builder: str | None = None
    push: bool = False
    push_stages: bool = False
    compression: str = "gzip"  # of the release image's layers as pushed (COMPRESSIONS)
    lazy: str | None = None  # an index for lazy pulling pushed beside the release image (LAZY_FORMATS)
    sign: str | None = None  # a key file or KMS reference, checked before any work
    signature_format: str = "both"  # the forms --sign makes (SIGNATURE_FORMATS)
    registry: str | None = None
    cache_from: str | None = None
    ccache_dir: Path | None = None
    source_mirror: str | None = None

    @classmethod
    def from_cli(cls, options: Mapping[str, object]) -> RunOptions:
        """The fields among click's parsed options (the request's own are left to `request_from`)."""
        return cls(**{field.name: options[field.name] for field in dataclasses.fields(cls) if options.get(field.name) is not None})

    def engine_refusals(self, builder: str) -> dict[str, object]:
        """What `Engine.refuse` weighs: the builder the plan settled on, the BuildKit-only options, zstd layers."""
        zstd = self.compression == "zstd"
        return {"builder": builder, "buildx_builder": self.buildx_builder, "ccache_dir": self.ccache_dir, "zstd": zstd}
