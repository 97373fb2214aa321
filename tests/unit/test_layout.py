"""The shape of the house: import layers (import-linter), package docstrings, module size.

Imports point one way: episodic_client <- schemas <- core (episodic) <- streams / consumers / recall <- stack,
with infra imported only by stack. episodic_client is the client distribution (clients/python): nothing of
the engine, ours or third-party. The contracts live in pyproject's [tool.importlinter]; `make lint` runs
`lint-imports` and so does this test, plus a run against a copy of the tree with a forbidden import added,
to prove the contracts fail when they should.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
ROOT_PACKAGES: list[str] = PYPROJECT["tool"]["importlinter"]["root_packages"]
TOOLS = {"tests", "bench", "eval"}  # top-level packages outside the distribution: they may import anything
# the distributions' packages (eval is a root package of the contracts for the acyclic one only)
PACKAGES = [p for p in ROOT_PACKAGES if p not in TOOLS]
CLIENT = "episodic_client"  # the one package of the client distribution, which has its own pyproject
CLIENT_DIST = Path("clients") / "python"
CLIENT_PYPROJECT = tomllib.loads((ROOT / CLIENT_DIST / "pyproject.toml").read_text())


def src(pkg: str) -> Path:
    """Where a package's sources sit in the repository (relative): the client's in its distribution."""
    return CLIENT_DIST / pkg if pkg == CLIENT else Path(pkg)


MAX_LINES = 400
SIZE_MARKER = re.compile(r"^[ \t]*Size:[ \t]*\S+(?:[ \t]+\S+){2,}", re.MULTILINE)  # "Size:" and a reason of 3+ words


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` over the tree at `root` (its own pyproject, its packages first on the path)."""
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run(
        [sys.executable, "-c", code, "--config", "pyproject.toml", "--no-cache", "--no-logo"],
        cwd=root,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(root / CLIENT_DIST)])},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_import_contracts_hold() -> None:
    run = lint_imports(ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "6 kept, 0 broken" in run.stdout, run.stdout


@pytest.fixture(scope="module")
def tree_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The packages' sources and pyproject.toml, copied: a probe module is added per case, then removed."""
    root = tmp_path_factory.mktemp("tree")
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    for pkg in ROOT_PACKAGES:
        # eval/results and eval/cache: what a run writes there (a file may vanish while it is copied)
        ignore = shutil.ignore_patterns("__pycache__", "*.json", "*.y*ml", "results", "cache", "*.npy", "*.npz")
        shutil.copytree(ROOT / src(pkg), root / src(pkg), ignore=ignore)
    return root


@pytest.mark.parametrize(
    ("probes", "contract"),
    [
        # the core reaching up to the composition root, lazily inside a function
        ({"episodic/_probe.py": "def main() -> None:\n    from stack.cli import main\n"}, "layers"),
        # the contracts importing the core
        ({"schemas/_probe.py": "from episodic.kernel.settings import Settings\n"}, "layers"),
        # a stage importing another stage, or the broker launcher
        ({"consumers/_probe.py": "import recall.app\n"}, "independence"),
        ({"streams/_probe.py": "from infra.broker import free_port\n"}, "independence"),
        # the broker launcher importing the core
        ({"infra/_probe.py": "from episodic.kernel.settings import Settings\n"}, "infra (the broker launcher)"),
        # a lower sub-package of the core reaching up to a higher one, lazily; two siblings of one layer
        ({"episodic/store/_probe.py": "def f() -> None:\n    from episodic.maintenance.linker import Linker\n"},
         "the core's sub-packages"),
        ({"episodic/retrieval/_probe.py": "import episodic.lifecycle.forget\n"}, "the core's sub-packages"),
        # the client importing the engine's contracts, or a package of the engine's (lazily)
        ({"clients/python/episodic_client/_probe.py": "from schemas.journal import parse_entry\n"}, "the client"),
        ({"clients/python/episodic_client/_probe.py": "def f() -> None:\n    import msgspec\n"}, "the client"),
        # a circle between two modules of one package
        (
            {"stack/commands/_probe_a.py": "import stack.commands._probe_b\n",
             "stack/commands/_probe_b.py": "import stack.commands._probe_a\n"},
            "no import circles",
        ),
        # the same in eval (eval/embcache.py and eval/views.py imported each other until issue 24)
        (
            {"eval/_probe_a.py": "def f() -> None:\n    import eval._probe_b\n",
             "eval/_probe_b.py": "import eval._probe_a\n"},
            "no import circles",
        ),
    ],
    ids=[
        "core-up-lazy", "schemas-up", "stage-to-stage", "stage-to-infra", "infra-to-core", "store-up-to-maintenance",
        "retrieval-to-lifecycle", "client-to-schemas", "client-to-msgspec", "circle",
        "eval-circle",
    ],
)  # fmt: skip
def test_the_import_contracts_fail_on_a_violation(tree_copy: Path, probes: dict[str, str], contract: str) -> None:
    for rel, source in probes.items():
        (tree_copy / rel).write_text(source)
    try:
        run = lint_imports(tree_copy)
    finally:
        for rel in probes:
            (tree_copy / rel).unlink()
    report = run.stdout + run.stderr
    assert run.returncode == 1, report
    broken = report.split("Broken contracts", 1)[-1]
    assert contract in broken and "_probe" in broken, report


def _docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text(), filename=str(path))) or ""


def test_the_packages_are_the_same_everywhere() -> None:
    """A new top-level package is registered in every place that lists them, or this fails. The client's
    package sits in its own distribution: installed by its pyproject (and first, in the Makefile and the
    image), type-checked by its own mypy line."""
    on_disk = {p.parent.name for p in ROOT.glob("*/__init__.py")} - TOOLS | {CLIENT}
    assert {p.parent.name for p in (ROOT / CLIENT_DIST).glob("*/__init__.py")} == {CLIENT}
    assert CLIENT_PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"] == [f"{CLIENT}*"]
    assert CLIENT_PYPROJECT["project"]["name"] == "episodic-client"
    assert any(d.startswith("episodic-client") for d in PYPROJECT["project"]["dependencies"])
    assert f"\t$(BIN)/mypy {CLIENT_DIST / CLIENT}\n" in (ROOT / "Makefile").read_text()
    assert f"COPY {CLIENT_DIST} ./{CLIENT_DIST}\n" in (ROOT / "infra" / "Dockerfile").read_text()
    installed = {pattern.rstrip("*") for pattern in PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]}
    installed |= {CLIENT}
    first_party = set(PYPROJECT["tool"]["ruff"]["lint"]["isort"]["known-first-party"]) - TOOLS
    in_image = set(re.findall(r"^COPY (\w+) \./\1$", (ROOT / "infra" / "Dockerfile").read_text(), re.MULTILINE))
    in_image |= {CLIENT}
    linted = re.findall(r"^\t\$\(BIN\)/mypy ([\w ]+)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert len(linted) == 2, linted  # the packages, then the tools (bench, eval)
    assert set(PACKAGES) == on_disk == installed == first_party == in_image == set(linted[0].split()) | {CLIENT}
    assert set(linted[1].split()) == {"bench", "eval"}  # type-checked too, never installed
    assert PYPROJECT["project"]["scripts"]["episodic"] == "stack.cli:main"


@pytest.mark.parametrize("pkg", PACKAGES)
def test_every_package_says_what_it_owns_and_may_import(pkg: str) -> None:
    doc = _docstring(ROOT / src(pkg) / "__init__.py")
    assert re.search(r"^Owns: \S", doc, re.MULTILINE), f"{pkg}/__init__.py: no 'Owns: ...' line"
    assert re.search(r"^May import: \S", doc, re.MULTILINE), f"{pkg}/__init__.py: no 'May import: ...' line"


CORE = ROOT / "episodic"
MAX_SIDE_BY_SIDE = 20


def test_the_core_is_split_by_concern() -> None:
    """The core holds sub-packages only, each with at most 20 modules side by side, each in the core's layer
    contract, and each saying what it owns and may import."""
    loose = sorted(p.name for p in CORE.glob("*.py") if p.name != "__init__.py")
    assert not loose, f"modules side by side at the top of the core, not in a sub-package: {loose}"
    subs = sorted(p.parent.name for p in CORE.glob("*/__init__.py"))
    contract = next(c for c in PYPROJECT["tool"]["importlinter"]["contracts"] if c["id"] == "core")
    layered = {name.strip() for layer in contract["layers"] for name in re.split(r"[|:]", layer)}
    assert set(subs) == layered, (subs, layered)
    for sub in subs:
        modules = [p for p in (CORE / sub).glob("*.py") if p.name != "__init__.py"]
        assert 0 < len(modules) <= MAX_SIDE_BY_SIDE, (sub, len(modules))
        doc = _docstring(CORE / sub / "__init__.py")
        assert re.search(r"^Owns: \S", doc, re.MULTILINE), f"episodic/{sub}: no 'Owns: ...' line"
        assert re.search(r"^May import: \S", doc, re.MULTILINE), f"episodic/{sub}: no 'May import: ...' line"


def oversized_without_reason(paths: list[Path]) -> list[str]:
    """Modules over MAX_LINES lines whose docstring has no `Size: <reason>` line."""
    out = []
    for path in paths:
        lines = len(path.read_text().splitlines())
        if lines > MAX_LINES and not SIZE_MARKER.search(_docstring(path)):
            out.append(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {lines} lines")
    return out


def test_modules_over_400_lines_say_why() -> None:
    modules = [p for pkg in PACKAGES for p in sorted((ROOT / src(pkg)).rglob("*.py"))]
    assert len(modules) > 50
    offenders = oversized_without_reason(modules)
    assert not offenders, (
        f"modules over {MAX_LINES} lines: split them, or state why in a 'Size: <reason>' docstring line: {offenders}"
    )


def test_the_size_rule_catches_a_long_module(tmp_path: Path) -> None:
    body = "\n".join(f"x{i} = {i}" for i in range(MAX_LINES))
    long = tmp_path / "long.py"
    long.write_text(f'"""A module."""\n{body}\n')
    assert oversized_without_reason([long]) == [f"{long}: {MAX_LINES + 1} lines"]
    long.write_text(f'"""A module.\n\nSize: \n"""\n{body}\n')  # a marker without a reason does not count
    assert oversized_without_reason([long])
    long.write_text(f'"""A module.\n\nSize: one table of {MAX_LINES} constants, read top to bottom.\n"""\n{body}\n')
    assert oversized_without_reason([long]) == []
    short = tmp_path / "short.py"
    short.write_text('"""A module."""\nx = 1\n')
    assert oversized_without_reason([short]) == []


# Modules that may read the environment themselves: the settings class; the launcher (its command line and
# JAVA_HOME), which imports nothing of ours; the client's settings (the client installs without
# pydantic-settings: it reads EPISODIC_* itself).
ENV_READERS = {
    "episodic/kernel/settings.py",
    "infra/broker/__main__.py",
    "infra/broker/install.py",
    "clients/python/episodic_client/settings.py",
}
ENV_READ = re.compile(r"os\.environ\.get\(|os\.getenv\(|os\.environ\[|environ\.get\(")


def test_configuration_is_read_through_settings_only() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for pkg in PACKAGES
        for path in sorted((ROOT / src(pkg)).rglob("*.py"))
        if str(path.relative_to(ROOT)) not in ENV_READERS
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if ENV_READ.search(line)
    ]
    assert not offenders, "read the environment through episodic.kernel.settings.Settings:\n" + "\n".join(offenders)
