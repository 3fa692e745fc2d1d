"""What a checked build publishes (--push, --sign, --lazy): each image by the ID it was made as, nothing twice."""

from __future__ import annotations

import json
from datetime import datetime

from torchstack.build.release import CONTENT_LABEL, published
from torchstack.build.sbom import BUILD_INFO_LABEL
from torchstack.engines.engine import BuildRun
from torchstack.publishing import lazy, publish, signing
from torchstack.registries import registry
from torchstack.reports.build_report import Published, ReleaseOutcome
from torchstack.reports.progress import StageReport
from torchstack.request import tags
from torchstack.request.plan import RELEASE_STAGE, Plan
from torchstack.request.run_options import RunOptions


def publish_release(
    build: BuildRun, plan: Plan, run: RunOptions, pushes: list, release: ReleaseOutcome, began: datetime, record: dict
) -> Published:
    """The pushes (each: the image's ID, its name in the registry, its local name), then with --sign
    the pushed release image signed, its SBOM and provenance attested. The release tag moves to each
    new image, and a dated tag (TAG-YYYYMMDDHHMM) names it for good; a release the registry already
    holds under its tag (a scheduled rebuild that changed nothing) is neither pushed nor signed
    again. --compression zstd applies to the release image; the stages stay gzip, for the engines
    that take them as --cache-from (Docker 20.10 pulls no zstd)."""
    client, chosen, note = build.client, build.engine, build.note
    zstd = run.compression == "zstd"
    if pushes and plan.stages[-1].name == RELEASE_STAGE:
        source, remote, name = pushes[-1]
        if published(remote, client.images.get(release.image_id).labels.get(CONTENT_LABEL)):
            note(
                f"torchstack: {remote} already holds this release: the same records and packages at the same versions; "
                "nothing new to push or sign"
            )
            done = Published([publish.push(client, source, there, note, chosen) for source, there, _ in pushes[:-1]])
            return lazy_index(run, remote, None, note, done)
        pushes = [*pushes[:-1], (source, f"{remote}-{began:%Y%m%d%H%M}", name), (source, remote, name)]
    pushed = [
        publish.push(client, source, remote, note, chosen, zstd and name == plan.top_image, build.contexts)
        for source, remote, name in pushes
    ]
    for each in pushed:
        layers = f", {each.layers} layers, {each.already_there} already there" if each.layers else ""
        note(f"torchstack: pushed {each.reference} ({each.digest}{layers})")
    done = Published(pushed)
    if not run.sign:
        return lazy_index(run, pushed[-1].reference, pushed[-1].digest, note, done)
    info = json.loads(client.images.get(release.image_id).labels[BUILD_INFO_LABEL])
    signed = signing.sign_release(
        plan,
        info,
        pushed,
        tags.check_registry(run.registry),
        run.sign,
        release.sbom,
        record,
        began,
    )
    note(f"torchstack: signed {signed['reference']}, with its SBOM and provenance attested (cosign, no transparency log)")
    done.signed.append(signed)
    return lazy_index(run, pushed[-1].reference, pushed[-1].digest, note, done)


def by_id(pushes: list, plan: Plan, reports: list[StageReport], record: dict, release: ReleaseOutcome) -> list[tuple[str, str, str]]:
    """Each push (local name, name in the registry) with the ID this run made or took the image as,
    first: an image goes by that ID, not by what its name names by then, because another run on the
    engine may have given a stage's name its own image meanwhile (the same steps, without the cache
    record --push-stages gives it)."""
    made = {plan.base_image: record["base_image_id"], **{r.image: r.image_id for r in reports if r.image_id}}
    made[plan.top_image] = release.image_id
    return [(made.get(local, local), remote, local) for local, remote in pushes]


def lazy_index(run: RunOptions, remote: str, digest: str | None, note, done: Published) -> Published:
    """With --lazy: the SOCI index of the pushed top image (`remote`, at `digest`), made and pushed
    where the registry holds none for it yet (lazy.py), and signed with --sign's key: a lazy node
    reads the image's files through it. A rebuild that changed nothing finds the one it made."""
    if not run.lazy:
        return done
    ref = registry.parse(remote)
    where = registry.Registry(ref.host)
    digest = digest or where.manifest(ref)[0]
    pinned = f"{ref.name}@{digest}"
    found = lazy.indexes(where, ref.repository, digest)
    if found:
        note(f"torchstack: {pinned} has a SOCI index already ({found[-1]}): nothing new to index")
        index = found[-1]
    else:
        try:
            index = lazy.publish(pinned, note)
        except lazy.IndexFailed as exc:
            raise lazy.IndexFailed(
                f"{exc}; {pinned} is published without a SOCI index (nodes pull it whole): "
                "the same command again makes the index, and does not push or sign the release again"
            ) from None
        if run.sign:
            done.signed.append(signing.sign(f"{ref.name}@{index}", run.sign, None, None))
            note(f"torchstack: signed the SOCI index {index}")
    done.lazy = {"format": run.lazy, "image": pinned, "index": index}
    return done
