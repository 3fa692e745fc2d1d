"""docs/contributing/layout.md is the package: its folders, top to bottom, and in each the modules, every
module listed once in the folder it sits in, each with one job, in an order where every module imports
only modules below it (no cycles, nothing upward, no folder importing one above it)."""

import ast
import re

from torchstack.catalog.model import ROOT

PACKAGE = ROOT / "torchstack"
LAYOUT = ROOT / "docs" / "contributing" / "layout.md"
MODULES = sorted(p for p in PACKAGE.rglob("*.py") if p.stem != "__init__" and "files" not in p.parts)


def layout_order() -> list[str]:
    """The modules as the page lists them, top to bottom, each as FOLDER/NAME ("" for the package's top)."""
    order, folder = [], ""
    for line in LAYOUT.read_text().splitlines():
        if heading := re.match(r"^### (?:`(\w+)/`|the package's top)$", line):
            folder = heading[1] or ""
        elif row := re.match(r"^\| `(\w+)\.py` \|", line):
            order.append(f"{folder}/{row[1]}" if folder else row[1])
    return order


def name_of(path) -> str:
    return str(path.relative_to(PACKAGE).with_suffix(""))


def imports_of(path) -> set[str]:
    """The package's modules `path` imports, as FOLDER/NAME."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("torchstack"):
            parts = node.module.split(".")[1:]
            if (PACKAGE / "/".join(parts)).with_suffix(".py").is_file():
                found.add("/".join(parts))
            else:
                found |= {
                    "/".join([*parts, a.name]) for a in node.names if (PACKAGE / "/".join([*parts, a.name])).with_suffix(".py").is_file()
                }
    return found


def test_the_layout_lists_every_module_once_in_its_folder():
    order = layout_order()
    assert sorted(order) == sorted(name_of(p) for p in MODULES)
    assert len(order) == len(set(order))


def test_every_module_imports_only_modules_below_it_in_the_layout():
    order = layout_order()
    upward = {name_of(p): sorted(d for d in imports_of(p) if order.index(d) <= order.index(name_of(p))) for p in MODULES}
    assert not {m: d for m, d in upward.items() if d}, upward


def test_no_subpackage_imports_the_package_root():
    """`from torchstack import __version__` in a folder runs the package's face first: a way upward the
    import order above cannot see (it names no module). Only the package's top may import it."""
    found = []
    for path in MODULES:
        if path.parent == PACKAGE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            root_from = isinstance(node, ast.ImportFrom) and node.module == "torchstack"
            if root_from or isinstance(node, ast.Import) and any(a.name == "torchstack" for a in node.names):
                found.append(f"{name_of(path)}:{node.lineno}")
    assert not found, found


def _modules_imported(nodes) -> set[str]:
    """The names the package's modules are imported under, by `from torchstack.FOLDER import MODULE` among `nodes`."""
    found = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torchstack"):
            folder = PACKAGE.joinpath(*node.module.split(".")[1:])
            found |= {a.asname or a.name for a in node.names if (folder / f"{a.name}.py").is_file()}
    return found


def shadowed_modules(tree: ast.Module) -> list[str]:
    """Each function's parameter or local that has the name of a module the function sees imported:
    `engine` the module and `engine` the object, in one function."""
    outer = _modules_imported(tree.body)
    found = []
    for function in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        seen = outer | _modules_imported(ast.walk(function))
        args = function.args
        names = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
        names |= {n.id for n in ast.walk(function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        found += [f"{function.name}: {name}" for name in sorted(names & seen)]
    return found


def test_no_function_names_a_local_as_a_module_it_imports():
    found = {name_of(p): hits for p in MODULES if (hits := shadowed_modules(ast.parse(p.read_text())))}
    assert not found, found
    code = "from torchstack.engines import engine\n\ndef build(engine):\n    pass\n\ndef push():\n    engine = 1\n"
    assert shadowed_modules(ast.parse(code)) == ["build: engine", "push: engine"]


def test_each_folder_says_what_it_holds_and_what_it_may_import():
    """Its docstring names the folders it may import: those below it on the page, and no other."""
    folders = list(dict.fromkeys(m.split("/")[0] for m in layout_order() if "/" in m))
    for position, folder in enumerate(folders):
        doc = ast.get_docstring(ast.parse((PACKAGE / folder / "__init__.py").read_text())) or ""
        assert doc and "May import:" in doc, folder
        below = set(folders[position + 1 :])
        imported = {d.split("/")[0] for p in (PACKAGE / folder).glob("*.py") for d in imports_of(p) if "/" in d}
        assert imported - {folder} <= below, f"{folder} imports {sorted(imported - {folder} - below)}, above it"


def test_each_module_says_its_one_job_in_one_sentence_without_and():
    for path in MODULES:
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        first = doc.splitlines()[0] if doc else ""
        assert first.endswith(".") and first.count(". ") == 0, f"{path.name}: {first!r}"
        assert " and " not in first, f"{path.name}: {first!r}"


def test_no_module_over_400_lines_and_no_function_over_60():
    """Room to read: a module that grows past 400 lines wants to be two, a function past 60 wants a helper."""
    long = {}
    for path in MODULES:
        text = path.read_text()
        if text.count("\n") > 400:
            long[path.name] = f"{text.count(chr(10))} lines"
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 60:
                long[f"{path.name}:{node.name}"] = f"{node.end_lineno - node.lineno + 1} lines"
    assert not long, long


def test_the_pipeline_refuses_nothing_the_settling_step_could():
    """A build's options are refused before any work, in the settling step (settle.py, with the
    request's own checks in command_options.py): the pipeline and the stages' building raise no usage error,
    and make no plan of their own."""
    for module in ("run/pipeline.py", "making/building.py"):
        text = (PACKAGE / module).read_text()
        assert "UsageProblem" not in text and "make_plan" not in text, module


def test_no_function_takes_more_than_8_parameters():
    """A value carries what travels together (buildjob.BuildJob, engine.BuildRun): a function of a dozen
    parameters is one whose callers each pass the same half of them."""
    many = {}
    for path in MODULES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs) if a.arg not in ("self", "cls")]
                if len(names) > 8:
                    many[f"{path.name}:{node.name}"] = len(names)
    assert not many, many


# The words of engine kinds and builders: what only the engines' own code may compare.
ENGINE_WORDS = {"docker", "podman", "buildx", "buildkit", "legacy", "buildah"}


def _compared_words(node: ast.Compare) -> set[str]:
    parts = [node.left, *node.comparators]
    return {n.value for part in parts for n in ast.walk(part) if isinstance(n, ast.Constant) and n.value in ENGINE_WORDS}


def _asks_kind(node: ast.Compare) -> bool:
    """`engine.kind == ...`, `chosen.kind != ...`: an engine asked which kind it is."""
    kinds = [n for part in (node.left, *node.comparators) for n in ast.walk(part) if isinstance(n, ast.Attribute) and n.attr == "kind"]
    return any(word in ast.unparse(n.value) for n in kinds for word in ("engine", "chosen"))


def _word_constants() -> set[str]:
    """The engines' constants whose value is an engine's or builder's word (docker_engine.BUILDKIT = "buildx")."""
    found = set()
    for path in (PACKAGE / "engines").glob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and node.value.value in ENGINE_WORDS:
                found |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return found


ENGINES_MODULES = {p.stem for p in (PACKAGE / "engines").glob("*.py")}


def _engine_constants(node: ast.AST, constants: set[str]) -> list[str]:
    """A word constant of the engines (`constants`), imported from engines/ or read as one of their modules' attributes."""
    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torchstack.engines"):
        return [a.name for a in node.names if a.name in constants]
    if isinstance(node, ast.Attribute) and node.attr in constants and ast.unparse(node.value).rsplit(".", 1)[-1] in ENGINES_MODULES:
        return [ast.unparse(node)]
    return []


def test_outside_the_engines_nothing_asks_which_engine_or_builder_it_has():
    """What differs between engines and builders is a property or a method of theirs (engines/):
    no other module compares an engine's kind or a builder's name, or reaches into an SDK client's
    private attributes (`client.api._post`)."""
    found, constants = [], _word_constants()
    assert "BUILDKIT" in constants, constants
    for path in MODULES:
        if "engines" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and (_compared_words(node) or _asks_kind(node)):
                found.append(f"{name_of(path)}:{node.lineno}: {ast.unparse(node)}")
            found += [f"{name_of(path)}:{node.lineno}: {name}" for name in _engine_constants(node, constants)]
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                owner = ast.unparse(node.value).rsplit(".", 1)[-1]
                if owner in ("api", "client"):
                    found.append(f"{name_of(path)}:{node.lineno}: {ast.unparse(node)}")
    assert not found, found


# The engines' SDKs. Outside engines/, only the registries' login lookup reads Docker's config through docker.auth.
SDKS = ("docker", "podman")
LOGIN_LOOKUP = {"registries/logins": {"docker.auth", "docker.errors"}}
SDK_PARTS = {"images", "containers", "api"}


def sdk_uses(name: str, tree: ast.AST) -> list[str]:
    """Where module `name` imports an engine's SDK, or calls a client's `images`, `containers` or `api`."""
    found = []
    for node in ast.walk(tree):
        imported = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
        for module in imported:
            if module.split(".")[0] in SDKS and module not in LOGIN_LOOKUP.get(name, ()):
                found.append(f"{name}:{node.lineno}: import {module}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Attribute):
            if node.func.value.attr in SDK_PARTS and ast.unparse(node.func.value.value).rsplit(".", 1)[-1] in ("client", "sdk"):
                found.append(f"{name}:{node.lineno}: {ast.unparse(node.func)}")
    return found


def test_outside_the_engines_nothing_holds_an_engines_sdk():
    """What callers need of an engine (an image looked up, tagged, pushed, a container run) is a method of
    the engine: no module outside engines/ imports Docker's or Podman's SDK or calls its client."""
    found = [hit for path in MODULES if "engines" not in path.parts for hit in sdk_uses(name_of(path), ast.parse(path.read_text()))]
    assert not found, found


def test_the_sdk_test_finds_what_it_is_for():
    code = "import docker\nfrom podman import PodmanClient\nclient.images.get(x)\nbuild.client.containers.create(x)\nclient.api.push(r)\n"
    found = sdk_uses("making/release", ast.parse(code))
    assert len(found) == 5, found
    assert sdk_uses("registries/logins", ast.parse("import docker.auth\nimport docker.errors\n")) == []
    assert sdk_uses("making/release", ast.parse("engine.image(x)\nfound.images.append(x)\n")) == []


def test_the_code_reading_test_finds_what_it_is_for():
    """The test above, on code that does what it forbids: it must not pass by reading nothing."""
    code = 'if engine.kind == "podman": pass\nif plan.builder == "buildx": pass\nclient.api._post(url)\n'
    tree = ast.parse(code)
    compares = [n for n in ast.walk(tree) if isinstance(n, ast.Compare)]
    assert _asks_kind(compares[0]) and _compared_words(compares[1]) == {"buildx"}
    assert any(isinstance(n, ast.Attribute) and n.attr == "_post" for n in ast.walk(tree))
    imported = ast.parse(
        "from torchstack.engines.docker_engine import BUILDKIT, DockerEngine\nif w == docker_engine.BUILDKIT or cosign.BUILDKIT: pass\n"
    )
    assert [name for n in ast.walk(imported) for name in _engine_constants(n, {"BUILDKIT"})] == ["BUILDKIT", "docker_engine.BUILDKIT"]
