"""The table of modules in docs/contributing/layout.md is the package: every module listed once, each
with one job, in an order where every module imports only modules below it (no cycles, nothing upward)."""

import ast
import re

from torchstack.model import ROOT

PACKAGE = ROOT / "torchstack"
LAYOUT = ROOT / "docs" / "contributing" / "layout.md"


def layout_order() -> list[str]:
    return re.findall(r"^\| `(\w+)\.py` \|", LAYOUT.read_text(), re.MULTILINE)


def imports_of(module: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse((PACKAGE / f"{module}.py").read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("torchstack"):
            if node.module == "torchstack":
                found |= {a.name for a in node.names if (PACKAGE / f"{a.name}.py").exists()}
            else:
                found.add(node.module.split(".")[1])
    return found


def test_the_layout_lists_every_module_once():
    order = layout_order()
    assert sorted(order) == sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")
    assert len(order) == len(set(order))


def test_every_module_imports_only_modules_below_it_in_the_layout():
    order = layout_order()
    upward = {m: sorted(d for d in imports_of(m) if order.index(d) <= order.index(m)) for m in order}
    assert not {m: d for m, d in upward.items() if d}, upward


def test_each_module_says_its_one_job_in_one_sentence_without_and():
    for path in PACKAGE.glob("*.py"):
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        first = doc.splitlines()[0] if doc else ""
        assert first.endswith(".") and first.count(". ") == 0, f"{path.name}: {first!r}"
        assert " and " not in first, f"{path.name}: {first!r}"


def test_no_module_over_400_lines_and_no_function_over_60():
    """Room to read: a module that grows past 400 lines wants to be two, a function past 60 wants a helper."""
    long = {}
    for path in PACKAGE.glob("*.py"):
        text = path.read_text()
        if text.count("\n") > 400:
            long[path.name] = f"{text.count(chr(10))} lines"
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 60:
                long[f"{path.name}:{node.name}"] = f"{node.end_lineno - node.lineno + 1} lines"
    assert not long, long


def test_the_pipeline_refuses_nothing_the_settling_step_could():
    """A build's options are refused before any work, in the settling step (settle.py, with the
    request's own checks in options.py): the pipeline and the stages' building raise no usage error,
    and make no plan of their own."""
    for module in ("pipeline", "building"):
        text = (PACKAGE / f"{module}.py").read_text()
        assert "UsageProblem" not in text and "make_plan" not in text, module


def test_no_function_takes_more_than_8_parameters():
    """A value carries what travels together (buildjob.BuildJob, engine.BuildRun): a function of a dozen
    parameters is one whose callers each pass the same half of them."""
    many = {}
    for path in PACKAGE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs) if a.arg not in ("self", "cls")]
                if len(names) > 8:
                    many[f"{path.name}:{node.name}"] = len(names)
    assert not many, many
