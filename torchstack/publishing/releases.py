"""What a checked build publishes (--push, --sign, --lazy): each image by the ID it was made as, nothing twice."""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import datetime

from torchstack.engines.engine import BuildRun
from torchstack.making.release import CONTENT_LABEL, published
from torchstack.making.sbom import BUILD_INFO_LABEL
from torchstack.publishing import lazy, pushing, signing
from torchstack.registries import registry
from torchstack.reports.build_report import Published, ReleaseOutcome
from torchstack.reports.progress import StageReport
from torchstack.request.plan import RELEASE_STAGE, Plan
from torchstack.request.run_settings import RunOptions

# A dated tag: the release tag and the minute its image was pushed (TAG-YYYYMMDDHHMM).
DATED = re.compile(r".+-\d{12}")


def publish_release(
    build: BuildRun, plan: Plan, run: RunOptions, pushes: list, release: ReleaseOutcome, began: datetime, record: dict
) -> Published:
    """The pushes (each: the image's ID, its name in the registry, its local name), then with --sign
    the pushed release image signed, its SBOM and provenance attested. A dated tag (TAG-YYYYMMDDHHMM)
    names each new release image for good; the release tag moves to it last, once it is signed, so
    that it never names an unsigned image. A release the registry already holds under its tag (a
    scheduled rebuild that changed nothing) is neither pushed nor signed again, unless it is not signed
    as --sign asks. --compression zstd applies to the release image; the stages stay gzip, for the
    engines that take them as --cache-from (Docker 20.10 pulls no zstd)."""
    engine, note = build.engine, build.note
    if not pushes or plan.stages[-1].name != RELEASE_STAGE:
        done = Published([_push(build, run, plan, *each) for each in pushes])
        return lazy_index(run, done.pushed[-1].reference, done.pushed[-1].digest, note, done) if pushes else done
    (source, remote, name), stages = pushes[-1], pushes[:-1]
    content = engine.image(release.image_id).labels.get(CONTENT_LABEL)
    digest = published(remote, content)
    if digest:
        done = Published([_push(build, run, plan, *each) for each in stages])
        if run.sign and not signing.signed_as_asked(_pinned(remote, digest), run.sign, run.signature_format):
            note(f"torchstack: {remote} already holds this release, not signed as --sign asks: signing it (nothing new to push)")
            done.signed.append(_sign(build, plan, run, release, _pinned(remote, digest), began, record))
        else:
            note(
                f"torchstack: {remote} already holds this release: the same records and packages at the same versions; "
                "nothing new to push or sign"
            )
        return lazy_index(run, remote, digest, note, done)
    done = Published([_push(build, run, plan, *each) for each in stages])
    dated = _dated_push(build, run, plan, (source, remote, name), content, began)
    done.pushed.append(dated)
    if run.sign:
        try:
            done.signed.append(_sign(build, plan, run, release, _pinned(dated.reference, dated.digest), began, record))
        except signing.SigningFailed as exc:
            raise signing.SigningFailed(
                f"{exc}; the release tag {remote} is left where it was: the same command again signs "
                f"{dated.reference} and then tags it, without building or pushing it again"
            ) from None
    done.pushed.append(_tag(build, source, dated, remote))
    return lazy_index(run, remote, dated.digest, note, done)


def _push(build: BuildRun, run: RunOptions, plan: Plan, source: str, remote: str, name: str) -> pushing.Pushed:
    """One image pushed under one name, said in a line (zstd layers where asked, for the release image)."""
    zstd = run.compression == "zstd" and name == plan.top_image
    each = pushing.push(build.engine, source, remote, build.note, zstd, build.contexts)
    layers = f", {each.layers} layers, {each.already_there} already there" if each.layers else ""
    build.note(f"torchstack: pushed {each.reference} ({each.digest}{layers})")
    return each


def _dated_push(build: BuildRun, run: RunOptions, plan: Plan, push: tuple, content: str | None, began: datetime) -> pushing.Pushed:
    """The release image under its dated tag: pushed now, or, where an earlier run pushed this release
    under a dated tag and did not move the release tag (its signing failed), that push taken as it is."""
    source, remote, name = push
    ref = registry.parse(remote)
    where = registry.Registry(ref.host)
    try:
        listed = json.loads(where.request("GET", f"{ref.repository}/tags/list", "application/json").content).get("tags") or []
    except (registry.RegistryProblem, ValueError, AttributeError):
        listed = []
    earlier = sorted((t for t in listed if isinstance(t, str) and DATED.fullmatch(t) and t.rpartition("-")[0] == ref.tag), reverse=True)
    for tag in earlier[:3]:  # the newest few: a release is re-tagged within a run or two
        digest = published(f"{ref.name}:{tag}", content)
        if digest:
            build.note(f"torchstack: {ref.name}:{tag} holds this release already (an earlier run pushed it): not pushed again")
            return pushing.Pushed(f"{ref.name}:{tag}", digest, None, 0, 0)
    return _push(build, run, plan, source, f"{remote}-{began:%Y%m%d%H%M}", name)


def _sign(build: BuildRun, plan: Plan, run: RunOptions, release: ReleaseOutcome, pinned: str, began: datetime, record: dict) -> dict:
    info = json.loads(build.engine.image(release.image_id).labels[BUILD_INFO_LABEL])
    signed = signing.sign_release(plan, info, pinned, run, release.sbom, record, began)
    forms = signing.forms_said(signed, run.signature_format)
    build.note(f"torchstack: signed {signed['reference']}, with its SBOM and provenance attested (cosign, no transparency log): {forms}")
    return signed


def _tag(build: BuildRun, source: str, dated: pushing.Pushed, remote: str) -> pushing.Pushed:
    """The release tag `remote` put at the image `dated` names, through the registry (the same manifest
    bytes under a second tag), and given to the engine's image `source` too, as a push names it."""
    ref, pushed = registry.parse(remote), registry.parse(dated.reference)
    where = registry.Registry(ref.host)
    digest, media_type, body = where.manifest_bytes(pushed.repository, dated.digest)
    where.put_manifest(ref.repository, ref.tag, body, media_type)
    build.engine.tag(source, remote)
    build.note(f"torchstack: tagged {remote} ({digest})")
    return dataclasses.replace(dated, reference=remote)


def _pinned(remote: str, digest: str) -> str:
    return f"{remote.rpartition(':')[0]}@{digest}"


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
            done.signed.append(signing.sign(f"{ref.name}@{index}", run.sign, None, None, asked=run.signature_format))
            note(f"torchstack: signed the SOCI index {index}")
    done.lazy = {"format": run.lazy, "image": pinned, "index": index}
    return done
