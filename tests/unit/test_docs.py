"""The docs hold to the code: every command the pages show (README, docs/, benchmarks/: every page the
repository ships but the changelog) is accepted as shown, the engine-free ones print what the docs show,
docs/using/options.md's tables are the CLI's options, a command written inline in prose names only
options and choices its command has, and an option said to repeat does.

Commands in ```sh blocks are read as the user would type them: each must parse, and a build request
(`./build.py [OPTIONS]`, `plan`, `render`, `fetch`) must plan, with no engine. A block of any fence that
shows `$ ./build.py ...` is a transcript, `$ COMMAND` then the lines it prints (all of them or some, `...` between):
each is run and every line shown must be a line of its output, the release's month (`rYY.MM`) aside.
Only engine-free commands are shown so (plan, render, matrix, list, --help, and refusals); a
command that needs an engine is run by the engine tests where the suite builds that request.

The runs are made as on a host with no local wheelhouse (no pip configuration), where a page's
output would otherwise depend on the host: pages say which host an example is for."""

from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import click
import pytest

from tests.pages import prose, shipped_pages
from torchstack.catalog.model import ROOT, load_catalog
from torchstack.cli import make_cli

# Every shipped page but the changelog, which keeps what each release did in the words of its day.
PAGES = shipped_pages("CHANGELOG.md")
OPTIONS = ROOT / "docs" / "using" / "options.md"
ENGINE_FREE = ("plan", "render", "matrix", "list")
BUILD_REQUESTS = (None, "plan", "render", "fetch")
RELEASE = re.compile(r"\br\d\d\.\d\d\b")


def _blocks(kind: str | None) -> list[tuple[str, str]]:
    """(page, text) of each fenced block of `kind` (sh: also bash; None: every block) in the pages."""
    kinds = ("sh", "bash") if kind == "sh" else (kind,)
    found = []
    for page in PAGES:
        for fence, text in re.findall(r"^```(\w*)\n(.*?)^```", page.read_text(), re.MULTILINE | re.DOTALL):
            if kind is None or fence in kinds:
                found.append((page.name, text))
    return found


def _commands_shown() -> list[tuple[str, list[str]]]:
    """(page, arguments after ./build.py) of each ./build.py command in the pages' sh blocks."""
    found = []
    for page, text in _blocks("sh"):
        for line in text.replace("\\\n", " ").splitlines():
            for part in re.split(r"&&|\$\(|\)", line.split(" #")[0]):
                words = shlex.split(part.strip()) if "./build.py" in part else []
                if words:
                    found.append((page, words[words.index("./build.py") + 1 :]))
    return found


def _transcripts() -> list[tuple[str, str, list[str]]]:
    """(page, command, lines shown) of each `$ ./build.py ...` in the pages' blocks, whatever their fence
    says (console, text or none): a block that shows the command and what it prints is a transcript."""
    found = []
    for page, text in _blocks(None):
        if not re.search(r"^\$ \./build\.py", text, re.MULTILINE):
            continue
        for chunk in re.split(r"^\$ ", text, flags=re.MULTILINE)[1:]:
            command, *shown = chunk.replace("\\\n", " ").splitlines()
            found.append((page, command.strip(), [line for line in shown if line.strip() and line.strip() != "..."]))
    return found


def _neutral_env() -> dict[str, str]:
    """The environment of a host with no local wheelhouse and no engine preference."""
    drop = ("PIP_FIND_LINKS", "TORCHSTACK_ENGINE", "TORCHSTACK_TEST_WHEELHOUSE", "PIP_CERT", "PIP_INDEX_URL")
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "PIP_CONFIG_FILE": os.devnull}


def _run(arguments: list[str]) -> subprocess.CompletedProcess:
    """./build.py ARGUMENTS, in the current folder, on a neutral host (_neutral_env)."""
    command = [sys.executable, str(ROOT / "build.py"), *arguments]
    return subprocess.run(command, capture_output=True, text=True, env=_neutral_env(), timeout=120)


def _parse(arguments: list[str]) -> str | None:
    """Parse `arguments` as the command line does, without running anything; the subcommand named."""
    cli = make_cli(load_catalog())
    every = {opt: param for command in [cli, *cli.commands.values()] for param in command.params for opt in param.opts}
    at, skip = len(arguments), False
    for index, word in enumerate(arguments):
        if skip:
            skip = False
        elif word.startswith("-"):
            skip = "=" not in word and not getattr(every.get(word), "is_flag", True)
        elif word in cli.commands:
            at = index
            break
    with cli.make_context("build.py", arguments[:at]) as context:
        if at == len(arguments):
            return None
        cli.commands[arguments[at]].make_context(arguments[at], arguments[at + 1 :], parent=context).close()
        return arguments[at]


def _request_of(arguments: list[str]) -> list[str]:
    """What `plan` takes of a build's arguments: the request, without how the build runs (--push,
    --sign, --mirror-dir, ...), which only a build reads."""
    cli = make_cli(load_catalog())
    plan = {opt for param in cli.commands["plan"].params for opt in param.opts}
    every = {opt: param for command in [cli, *cli.commands.values()] for param in command.params for opt in param.opts}
    kept, skip = [], False
    for word in arguments:
        if skip:
            skip = False
        elif word.startswith("--") and word.split("=")[0] not in plan:
            skip = "=" not in word and not getattr(every.get(word), "is_flag", True)
        else:
            kept.append(word)
    return kept


@pytest.mark.parametrize(("page", "arguments"), _commands_shown(), ids=lambda value: value if isinstance(value, str) else None)
def test_every_command_the_docs_show_is_accepted_as_shown(page, arguments, tmp_path, monkeypatch):
    arguments = [word for word in arguments if word != "..."]
    monkeypatch.chdir(tmp_path)  # the files a page names (cosign.pub, a keyring), made empty here
    for word in arguments:
        if re.fullmatch(r"[\w.-]+\.(gpg|pub|key|txt|yaml)", word):
            (tmp_path / word).touch()
    try:
        command = _parse(arguments)
    except click.ClickException as exc:
        pytest.fail(f"{page}: ./build.py {' '.join(arguments)}: {exc.format_message()}")
    if command in BUILD_REQUESTS:
        planned = _run(["plan", *_request_of(arguments[1:] if command else arguments)])
        assert planned.returncode == 0, f"{page}: ./build.py {' '.join(arguments)} does not plan: {planned.stderr[-500:]}"


def _stand_in_wheel(folder: Path, file: str, shown: list[str]) -> None:
    """A wheel the page's reader has (a plugin downloaded from PyPI) made here under the name the page
    gives it, as the page's output says it is: the torch it requires ("requires torch==V"), the
    libraries its compiled module needs ("its compiled modules need libA.so, ..."; stand-ins made by
    gcc). What is checked is that the toolkit says of such a wheel what the page says it does."""
    name, version = file.split("-")[:2]
    said = " ".join(shown)
    requires = re.search(r"requires (torch==[\w.]+)", said)
    needed = re.search(r"its compiled modules need ([^)]*)\)", said)
    work = folder / f"{name}-build"
    work.mkdir()
    members = {}
    if needed:
        libraries = needed[1].split(", ")
        (work / "stub.c").write_text("int stub(void) { return 0; }\n")
        for library in libraries:
            made = ["gcc", "-shared", "-fPIC", f"-Wl,-soname,{library}", "-o", str(work / library), str(work / "stub.c")]
            subprocess.run(made, check=True)
        links = [f"-l:{library}" for library in libraries]
        module = work / "_C.so"
        command = ["gcc", "-shared", "-fPIC", "-o", str(module), str(work / "stub.c"), f"-L{work}", "-Wl,--no-as-needed", *links]
        subprocess.run(command, check=True)
        members[f"{name}/_C.so"] = module.read_bytes()
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += f"Requires-Dist: {requires[1]}\n" if requires else "Requires-Dist: torch\n"
    with zipfile.ZipFile(folder / file, "w") as out:
        out.writestr(f"{name}-{version}.dist-info/METADATA", metadata)
        for member, data in members.items():
            out.writestr(member, data)


@pytest.mark.parametrize(("page", "command", "shown"), _transcripts(), ids=lambda value: value if isinstance(value, str) else None)
def test_every_transcript_the_docs_show_is_what_the_command_prints(page, command, shown, tmp_path, monkeypatch):
    words = shlex.split(command)
    assert words[0] == "./build.py", f"{page}: a transcript runs ./build.py, not {words[0]}"
    arguments = words[1:]
    assert arguments and (arguments[0] in ENGINE_FREE or "--help" in arguments or any("error" in line for line in shown)), (
        f"{page}: `{command}` needs an engine: show it in a sh block, not as a transcript"
    )
    monkeypatch.chdir(tmp_path)
    for word in arguments:
        if re.fullmatch(r"\./[\w.+-]+\.whl", word):
            _stand_in_wheel(tmp_path, word[2:], shown)
    ran = _run(arguments)
    printed = {RELEASE.sub("rYY.MM", line.rstrip()) for line in (ran.stdout + ran.stderr).splitlines()}
    refused = any(line.startswith("torchstack: error:") for line in shown)
    assert ran.returncode == (2 if refused else 0), f"{page}: `{command}` exited {ran.returncode}: {ran.stderr[-500:]}"
    missing = [line for line in shown if RELEASE.sub("rYY.MM", line.rstrip()) not in printed]
    assert not missing, f"{page}: `{command}` does not print {missing}; it prints:\n{ran.stdout[-3000:]}{ran.stderr[-1000:]}"


def _table_rows(heading: str | None) -> list[tuple[str, str]]:
    """(first cell, the rest) of each row of the table under `heading` in options.md (None: the
    commands' table, before the first heading)."""
    text = OPTIONS.read_text()
    section = (text.split(f"## {heading}\n", 1)[1] if heading else text).split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("|---")]
    return [(cells[0], " | ".join(cells[1:])) for cells in (re.split(r" (?<!\\)\| ", row.strip("| ")) for row in rows[1:])]


def _options(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*|-k)\b", text))


def _choices_shown(cell: str) -> dict[str, tuple[set[str], set[str]]]:
    """--option a\\|b\\|c in a first cell: the choices it lists, and the other words the cell
    backticks (an alias: `pytorch` = `final`)."""
    return {
        option: (set(listed.split("\\|")), set(re.findall(r"`(\w+)`", cell)))
        for option, listed in re.findall(r"(--[a-z][a-z0-9-]*) ((?:[\w.-]+\\\|)+[\w.-]+)", cell)
    }


def _agree(option: str, param: click.Parameter, shown: tuple[set[str], set[str]]) -> None:
    listed, aside = shown
    if not isinstance(param.type, click.Choice):
        return  # FILE\|DIR\|URL: kinds of value, not choices
    choices = set(param.type.choices)
    assert listed <= choices and choices <= listed | aside, f"{option}: options.md lists {sorted(listed)}; the CLI takes {sorted(choices)}"


def _cli():
    return make_cli(load_catalog())


def test_every_option_of_a_build_is_in_options_md_and_every_one_there_exists():
    cli = _cli()
    build = {opt for param in cli.params if isinstance(param, click.Option) for opt in param.opts if opt.startswith("--")}
    rows = _table_rows("Options of a build")
    documented = set().union(*(_options(first) for first, _ in rows))
    commands = set().union(*(_options(first) for first, _ in _table_rows(None)))
    assert build - documented - commands == set(), "options of a build that options.md's tables do not name"
    assert documented - build == set(), "options options.md's build table names that the CLI does not have"


def test_choices_and_environment_defaults_in_options_md_are_the_clis():
    cli = _cli()
    params = {opt: param for param in cli.params if isinstance(param, click.Option) for opt in param.opts}
    for first, rest in _table_rows("Options of a build"):
        for option, shown in _choices_shown(first).items():
            _agree(option, params[option], shown)
        for option in _options(first):
            said = set(re.findall(r"defaults to `\$(\w+)`|Default: `?\$(\w+)", rest))
            envvars = {name for pair in said for name in pair if name}
            if len(_options(first)) == 1 or envvars:
                wanted = params[option].envvar
                if envvars or wanted:
                    assert envvars == ({wanted} if isinstance(wanted, str) else set(wanted or ())), (option, envvars, wanted)


def test_every_command_is_in_options_md_with_the_options_it_takes():
    cli = _cli()
    rows = _table_rows(None)
    build_rows = _table_rows("Options of a build")
    build = {opt for param in cli.params for opt in param.opts}
    shown_commands = {name for first, _ in rows for name in re.findall(r"`\./build\.py (\w+)", first)}
    assert shown_commands == set(cli.commands), "commands the table and the CLI do not share"
    for name, command in cli.commands.items():
        own = {opt for param in command.params if isinstance(param, click.Option) for opt in param.opts if opt not in build}
        text = " ".join(first + " " + rest for first, rest in rows if f"./build.py {name}" in first)
        text += " ".join(first + " " + rest for first, rest in build_rows if f"`{name}`" in rest)
        missing = {opt for opt in own if opt not in _options(text) and opt != "--help"}
        assert not missing, f"options of `{name}` options.md does not name: {sorted(missing)}"
        shown = {opt for first, _ in rows if f"./build.py {name}" in first for opt in _options(first)}
        takes = {opt for param in command.params for opt in param.opts}
        shown -= build - takes  # a build's own form beside the command (`plan` or `--dry-run`)
        assert shown <= takes, f"options.md shows `{name}` with options it does not take: {sorted(shown - takes)}"
        for first, _ in rows:
            if f"./build.py {name}" in first:
                for option, shown in _choices_shown(first).items():
                    _agree(option, next(p for p in command.params if option in p.opts), shown)


def test_every_default_of_a_build_option_is_the_one_options_md_says():
    """An option with a value by default: its row in options.md names that value as the default."""
    cli = _cli()
    rows = _table_rows("Options of a build")
    for param in cli.params:
        if not isinstance(param, click.Option) or param.is_flag or not isinstance(param.default, str):
            continue
        row = next(first + " | " + rest for first, rest in rows if param.opts[0] in _options(first))
        said = re.search(rf"`{re.escape(param.default)}`[^|.;]{{0,40}}\bdefault|\bdefault[^|.;]{{0,40}}`{re.escape(param.default)}`", row)
        assert said, f"{param.opts[0]}: options.md does not say its default is `{param.default}`"


def _written_in_prose() -> list[tuple[str, str]]:
    """(page, command) of each `./build.py ...` the pages write inline, outside their fenced blocks."""
    found = []
    for page in PAGES:
        found += [(page.name, command) for command in re.findall(r"`(\./build\.py [^`]+)`", prose(page.read_text()))]
    return found


def prose_problems(command: str) -> list[str]:
    """What an inline command (a synopsis: [optional] parts, A|B alternatives, PLACEHOLDERS, ...) names
    that the CLI does not have: an option its command (or, before the command, a build) does not take,
    a choice an option does not offer."""
    cli = _cli()
    words = command.replace("\\|", "|").replace("[", " ").replace("]", " ").split()[1:]
    owner, problems = cli, []
    for index, word in enumerate(words):
        if word in cli.commands and owner is cli:
            owner = cli.commands[word]
            continue
        if not word.startswith("-") or word == "...":
            continue
        params = {opt: param for param in owner.params for opt in param.opts}
        option = word.split("=")[0]
        if option not in params and option != "--help":
            problems.append(f"{option}: not an option of {owner.name if owner is not cli else 'a build'}")
            continue
        given = word.partition("=")[2] or (words[index + 1] if index + 1 < len(words) else "")
        param = params.get(option)
        if isinstance(getattr(param, "type", None), click.Choice) and "|" in given:
            offered = {str(choice) for choice in param.type.choices}
            problems += [f"{option} {choice}: not one of {sorted(offered)}" for choice in given.split("|") if choice not in offered]
    return problems


@pytest.mark.parametrize(("page", "command"), _written_in_prose(), ids=lambda value: value)
def test_every_command_written_in_prose_names_what_the_cli_has(page, command):
    assert prose_problems(command) == [], f"{page}: `{command}`"


@pytest.mark.parametrize(
    ("command", "problem"),
    [
        ("./build.py matrix --format github|xml", "--format xml: not one of"),
        ("./build.py verify IMAGE --keys cosign.pub", "--keys: not an option of verify"),
        ("./build.py --frobnicate plan", "--frobnicate: not an option of a build"),
    ],
)
def test_a_command_in_prose_that_the_cli_lacks_is_found(command, problem):
    assert any(problem in p for p in prose_problems(command))


def repeat_problems(pages: dict[str, str]) -> list[str]:
    """Options said to repeat, in `--help` or in a sentence of a page (`pages`: name -> text), that no
    command taking them lets repeat."""
    cli = _cli()
    params = [(command, param) for command in [cli, *cli.commands.values()] for param in command.params]
    problems = [
        f"--help of {command.name}: {param.opts[0]} is said to repeat and does not"
        for command, param in params
        if re.search(r"\brepeat", getattr(param, "help", None) or "", re.IGNORECASE) and not param.multiple
    ]
    for name, text in pages.items():
        # paragraphs and table rows; in each, the parenthesis that says "repeat", else its sentence
        units = [u for block in re.split(r"\n\s*\n", prose(text)) for u in (block.splitlines() if block.startswith("|") else [block])]
        for unit in units:
            sentences = re.split(r"(?<=[.;])\s+", unit.replace("\n", " "))
            said = re.findall(r"\([^()]*\brepeat[^()]*\)", unit, re.IGNORECASE) or [
                sentence for sentence in sentences if re.search(r"\brepeat", sentence, re.IGNORECASE)
            ]
            for option in {o for clause in said for o in re.findall(r"`(--[a-z][a-z0-9-]*)", clause)}:
                taking = [param for _, param in params if option in param.opts]
                if taking and not any(param.multiple for param in taking):
                    problems.append(f"{name}: {option} is said to repeat and does not")
    return problems


def test_an_option_said_to_repeat_repeats():
    assert repeat_problems({page.name: page.read_text() for page in PAGES}) == []


def test_an_option_said_to_repeat_that_does_not_is_found():
    said = {"page.md": "The matrix takes `--format` filters, which may repeat."}
    assert repeat_problems(said) == ["page.md: --format is said to repeat and does not"]


def defaults_named_in(text: str) -> list[tuple[str, set[str], set[str]]]:
    """(option, environment variables, values) of each "`--option VALUE` (default `$VAR`, else `x`)"
    a page writes in its prose or tables: the default it names for that option."""
    found = []
    for option, said in re.findall(r"`(--[a-z][a-z0-9-]*)[^`]*`\s*\(default ([^)]*)\)", text):
        named = re.findall(r"`([^`]+)`", said)
        found.append((option, {n[1:] for n in named if n.startswith("$")}, {n for n in named if not n.startswith("$")}))
    return found


@functools.cache
def _options_build_first() -> dict[str, click.Parameter]:
    """Every option of the CLI by name, a build's own where a command has one of the same name
    (verify's --ca-bundle reads no variable; a build's reads $PIP_CERT)."""
    cli, every = _cli(), {}
    for command in [cli, *cli.commands.values()]:
        for param in command.params:
            for opt in param.opts:
                every.setdefault(opt, param)
    return every


def default_problems(text: str) -> list[str]:
    """Each default a page names that the CLI's option does not have: another environment variable,
    another value."""
    problems = []
    for option, envvars, values in defaults_named_in(text):
        param = _options_build_first().get(option)
        if param is None:
            problems.append(f"{option}: no such option")
            continue
        wanted = {param.envvar} if isinstance(param.envvar, str) else set(param.envvar or ())
        if envvars and envvars != wanted:
            said = ", $".join(sorted(envvars))
            problems.append(f"{option}: the page says it defaults to ${said}; the CLI reads {sorted(wanted) or 'none'}")
        if values and str(param.default) not in values:
            problems.append(f"{option}: the page says its default is {', '.join(sorted(values))}; the CLI's is {param.default}")
    return problems


def test_every_default_a_page_names_for_an_option_is_the_clis():
    """The toolkit's pages (benchmarks/README.md names its scripts' own options)."""
    pages = [page for page in PAGES if page.parent.name != "benchmarks"]
    assert sum(len(defaults_named_in(prose(page.read_text()))) for page in pages) >= 3, "the pages' defaults were not found"
    problems = [f"{page.name}: {problem}" for page in pages for problem in default_problems(prose(page.read_text()))]
    assert not problems, problems


@pytest.mark.parametrize(
    ("written", "found"),
    [
        ("`--engine auto|docker|podman` (default `$DOCKER_ENGINE`, else `auto`)", "the CLI reads ['TORCHSTACK_ENGINE']"),
        ("`--engine auto|docker|podman` (default `$TORCHSTACK_ENGINE`, else `docker`)", "the CLI's is auto"),
        ("`--pip-index-url URL` (default `$PIP_EXTRA_INDEX_URL`)", "the CLI reads ['PIP_INDEX_URL']"),
    ],
)
def test_a_default_a_page_names_wrongly_is_found(written, found):
    assert any(found in problem for problem in default_problems(written)), default_problems(written)
