"""What the commands print for a person: a plan, a backend's details, what an image says about itself."""

from __future__ import annotations

from torchstack.base import redact
from torchstack.base.reproducible import described
from torchstack.catalog.model import Catalog
from torchstack.request.plan import Plan
from torchstack.request.planner import env_line


def format_plan(plan: Plan, builder: str) -> str:
    lines = [
        f"release tag   {plan.release_tag}",
        f"final image   {plan.final_image}",
        f"architecture  {plan.arch.name} ({plan.platform}){' emulated on this ' + plan.host_arch + ' host' if plan.emulated else ''}",
        f"backend       {plan.backend.name}: {plan.backend.description}",
        f"target        {plan.target.name}: {plan.target.flag}" + (f"  [{plan.target_note}]" if plan.target_note else ""),
        f"distribution  {plan.distribution_note}",
        "apt suites    "
        + (", ".join(f"{s.name} ({redact.url(s.url)})" for s in plan.apt.suites) if plan.base_is_bootstrapped else "the --base-image's own")
        + ("" if plan.apt.updates else "  [--no-security-updates]")
        + (f"  [Debian as it was at {plan.apt.snapshot.timestamp}: no fix published since]" if plan.apt.snapshot else ""),
        f"compiler      CFLAGS={plan.cflags}  (GCC {plan.distribution.gcc}, {plan.distribution.name})",
        f"torch         {plan.torch_version}" + (f"  [{plan.torch_note}]" if plan.torch_note else ""),
        f"jobs          {plan.jobs} (PyTorch MAX_JOBS {plan.torch_jobs})" + (f"  [{plan.jobs_note}]" if plan.jobs_note else ""),
        f"builder       {builder}" + (" (ccache cache mount, CA as a secret)" if plan.step_mounts else ""),
        f"runtime       {plan.runtime}: "
        + ("with" if plan.runtime == "full" else "without")
        + " what torch.compile needs; "
        + (env_line(plan.payload.env) or "no environment defaults"),
        f"base image    {plan.base_image}" + (" (bootstrapped from the Debian archive if absent)" if plan.base_is_bootstrapped else ""),
        f"dates         SOURCE_DATE_EPOCH {described(plan.source_date_epoch)}: {plan.epoch_origin}",
        "components",
    ]
    for c in plan.components:
        how = {"source": "compiled from source", "distro": "Debian packages", "wheel": "prebuilt wheel"}[c.method]
        pin = f", sha256 {c.source.sha256[:12]}… ({c.source.sha256_from})" if c.source else ""
        version = "(Debian's)" if c.method == "distro" else c.version
        lines.append(f"  {c.name:<9} {version:<10} {how}{pin}" + (f": {', '.join(c.runtime_packages)}" if c.method == "distro" else ""))
    for p in plan.plugins:
        found = f"{p.wheel.path.name}, sha256 {p.wheel.sha256[:12]}…" if p.wheel else "downloaded and checked when the build starts"
        lines.append(f"plugin        {p.requirement} ({p.why}; {found})")
    lines.append("stages")
    for stage in plan.stages:
        lines.append(f"  {stage.name:<6} {stage.image}")
        lines.append(f"         FROM {stage.parent_image}" + "".join(f"; copies from {i}" for i in stage.copies.values()))
        for c in stage.components:
            if c.env:
                lines.append(f"         {c.name}: {env_line(c.env)}")
    return "\n".join(lines)


def backend_details(catalog: Catalog, backend) -> list[str]:
    """What `list backends` says under a backend: targets, what it needs from the CPU, its plugins."""
    targets = [t.name for t in catalog.targets if t.arch in backend.arches and t.name in (backend.targets or (t.name,))]
    lines = [f"targets: {', '.join(dict.fromkeys(targets))}"]
    if backend.cpu_wants:
        lines.append(f"CPU: wants {', '.join(backend.cpu_wants.features)}: {backend.cpu_wants.why}")
    for name in backend.plugins:
        plugin = catalog.plugins[name]
        lines.append(f"plugin: {name} ({plugin.vendor}) {', '.join(plugin.versions)}: {plugin.description}")
    probes = [*backend.probes, *(f"{p} ({a})" for a in backend.arches for p in catalog.architectures[a].probes)]
    if probes:
        lines.append(f"reports at run time: {', '.join(probes)}")
    return lines


def format_inspection(report: dict) -> str:
    """`inspect`'s summary for a person."""
    info, toolkit = report["build_info"], report["build_info"].get("toolkit") or {}
    lines = [
        f"image         {report['image']} ({report['id'][:19]}, built {report['created'][:19]}Z)",
        f"release tag   {info.get('release_tag', '(a stage image)')}"
        + ("" if report["labels_agree"] or "release_tag" not in info else "  [labels disagree with it]"),
        f"torch         {info.get('torch_version', '-')} on {info.get('backend', '(a stage image: any backend)')}, "
        f"{info['arch']}, {info['distribution']}",
        f"target        {info.get('target', '(nothing compiled for one)')}: {info.get('target_flag', '-')}"
        + (f"  (CFLAGS {info['cflags']})" if info.get("cflags") else ""),
        f"toolkit       torchstack {toolkit.get('version', '?')}, revision {toolkit.get('revision') or 'unknown'}",
        "components",
    ]
    for name, c in info["components"].items():
        how = {"source": "compiled here", "distro": "Debian packages", "wheel": "prebuilt wheel"}[c["method"]]
        lines.append(
            f"  {name:<9} {c['version'] or '-':<12} {how}" + (f" ({', '.join(c['debian_packages'])})" if c.get("debian_packages") else "")
        )
        if c.get("source"):
            lines.append(f"            {redact.url(c['source']['url'])}")
            lines.append(f"            sha256 {c['source']['sha256']} ({c['source']['sha256_from']})")
            patches = ", ".join(p["name"] for p in c.get("patches", [])) or "none"
            lines.append(f"            patches: {patches}")
    sbom = report["sbom"]
    if sbom is None:
        lines.append("sbom          none in this image")
    else:
        versions = ", ".join(f"{k} {v}" for k, v in sbom["key_versions"].items())
        lines.append(
            f"sbom          {sbom['format']}, {sbom['python_packages']} Python packages ({versions}), "
            f"{sbom['debian_packages']} Debian packages; the whole of it: {report['sbom_path']}"
        )
    return "\n".join(lines)
