"""The import rules of docs/architecture.md, checked on the source with ``ast``.

Every module's imports are parsed (module-level and inside functions, since collectors
import TensorFlow lazily), resolved to dotted names through ``pyproject.toml``'s
``package-dir`` (``src/tfdiag/collectors/`` is ``tfdiag.collectors``), and held to the rules: which
room may import which, where TensorFlow may be imported, and no cycles among tfdiag
modules. TensorFlow's and Keras's private state is reached from ``tf_internals`` only.
Each rule is also shown to fail on a tiny module tree that breaks it.
"""

from __future__ import annotations

import ast
import graphlib
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

TENSORFLOW = ("tensorflow", "keras", "tf_keras")
# What the TensorBoard, CLI and analysis side never import (nor anything they import).
TRAINING_SIDE = ("tfdiag.collectors", "tfdiag.sample_jobs")
# The command line: ``cli`` and what it writes to stderr (``cli_stderr``).
CLI = ("tfdiag.cli", "tfdiag.cli_stderr")


@dataclass(frozen=True)
class Rule:
    """Modules under ``room`` may not import any module under the ``forbidden`` prefixes."""

    room: str
    forbidden: tuple[str, ...]
    module_level_only: bool = False  # the rule holds for module-level imports only (lazy imports are fine)


RULES = (
    Rule("tfdiag.events", ("tfdiag",)),
    Rule("tfdiag.errors", ("tfdiag",)),
    Rule("tfdiag.store", TENSORFLOW + TRAINING_SIDE + ("tfdiag.analysis", "tfdiag.report", "tfdiag.tb_plugin",
                                                       *CLI)),
    Rule("tfdiag.analysis", TENSORFLOW + TRAINING_SIDE + ("tfdiag.report", "tfdiag.tb_plugin", *CLI)),
    Rule("tfdiag.report", TENSORFLOW + TRAINING_SIDE + ("tfdiag.tb_plugin", *CLI)),
    Rule("tfdiag.tb_plugin", TENSORFLOW + TRAINING_SIDE + CLI),
    Rule("tfdiag.collectors", ("tfdiag.analysis", "tfdiag.report", "tfdiag.tb_plugin", "tfdiag.sample_jobs",
                               *CLI)),
    Rule("tfdiag.collectors", TENSORFLOW, module_level_only=True),
    Rule("tfdiag.sample_jobs", ("tfdiag.analysis", "tfdiag.report", "tfdiag.tb_plugin", *CLI)),
)

# Modules allowed to import TensorFlow at import time, and why. Importing
# ``tfdiag.collectors`` itself stays cheap: its package names these lazily.
TENSORFLOW_AT_IMPORT = {
    "tfdiag.collectors.hook": "DiagnosticsHook subclasses tf.compat.v1.train.SessionRunHook",
    "tfdiag.collectors.callback": "DiagnosticsCallback subclasses keras.callbacks.Callback",
}

# The one collector allowed to import the analysis, only inside a function (on its own
# thread, when live findings are on), and the one module it may import.
ANALYSIS_INSIDE_FUNCTION = {
    "tfdiag.collectors.live_thread": "tfdiag.analysis.live_monitor",  # the live-findings thread: screen, then detectors
}

# Entry points that must start without TensorFlow: nothing they import at module level,
# directly or through other tfdiag modules, may import it.
LIGHT_ENTRY_POINTS = ("tfdiag.cli", "tfdiag.analysis", "tfdiag.report", "tfdiag.tb_plugin.plugin",
                      "tfdiag.collectors")


# The modules that may reach TensorFlow's and Keras's private state: the accessors every
# other module calls, and their text-format sibling.
PRIVATE_STATE_HOMES = ("tfdiag.collectors.tf_internals", "tfdiag.collectors.tf_formats")
PRIVATE_PACKAGES = ("tensorflow.python", "keras.src", "tf_keras.src", "tf_keras.python")

# Private names other modules may reach, and why.
PRIVATE_NAMES_ALLOWED = {
    "os._exit": "the standard library's documented exit without cleanup: private by spelling only",
}


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int
    module_level: bool


def package_dirs(root: Path) -> dict[str, Path]:
    """``{"tfdiag.collectors": root / "src/tfdiag/collectors", ...}``: every package
    ``pyproject.toml`` lists, in the folder its ``package-dir`` root (``src``) puts it."""
    config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    source_root = root / config["package-dir"][""]
    return {package: source_root / package.replace(".", "/") for package in config["packages"]}


def module_files(packages: dict[str, Path]) -> dict[str, Path]:
    """Every module's dotted name and file; a package is its ``__init__.py``."""
    modules = {}
    for package, folder in packages.items():
        for path in folder.glob("*.py"):
            name = package if path.stem == "__init__" else f"{package}.{path.stem}"
            modules[name] = path
    return modules


def imports_of(name: str, path: Path, known: set[str]) -> list[Import]:
    """The imports in one module, resolved to dotted names (``from a import b`` is ``a.b``
    when that is a module). Imports under ``if TYPE_CHECKING:`` never run and are skipped."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.stem == "__init__" else name.rpartition(".")[0]
    found = []

    def visit(node: ast.AST, module_level: bool) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child, module_level)
            return
        if isinstance(node, ast.Import):
            found.extend(Import(name, alias.name, node.lineno, module_level) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            for alias in node.names:
                target = f"{base}.{alias.name}"
                found.append(Import(name, target if target in known else base, node.lineno, module_level))
        inside = module_level and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, inside)

    visit(tree, True)
    return found


def all_imports(root: Path) -> list[Import]:
    modules = module_files(package_dirs(root))
    return [edge for name, path in sorted(modules.items()) for edge in imports_of(name, path, set(modules))]


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def rule_violations(imports: list[Import]) -> list[str]:
    """One sentence per import that breaks a rule."""
    violations = []
    for edge in imports:
        for rule in RULES:
            if not _under(edge.importer, rule.room) or (rule.module_level_only and not edge.module_level):
                continue
            if rule.module_level_only and TENSORFLOW_AT_IMPORT.get(edge.importer):
                continue
            if not edge.module_level and ANALYSIS_INSIDE_FUNCTION.get(edge.importer) == edge.imported:
                continue
            banned = next((prefix for prefix in rule.forbidden if _under(edge.imported, prefix)), None)
            if banned is not None:
                where = "at module level" if rule.module_level_only else "at all"
                violations.append(f"{edge.importer} (line {edge.line}) imports {edge.imported}: {rule.room} may not "
                                  f"import {banned} {where}")
    return violations


def heavy_imports_at_start(imports: list[Import], entry_points=LIGHT_ENTRY_POINTS) -> list[str]:
    """Entry points whose module-level import closure reaches TensorFlow, with the path."""
    module_level: dict[str, list[str]] = {}
    for edge in imports:
        if edge.module_level:
            module_level.setdefault(edge.importer, []).append(edge.imported)
    problems = []
    for entry in entry_points:
        paths = {entry: [entry]}
        frontier = [entry]
        while frontier:
            module = frontier.pop()
            # Importing a.b.c runs a/__init__ and a/b/__init__ first.
            parents = [module.rsplit(".", depth)[0] for depth in range(module.count("."), 0, -1)]
            for imported in module_level.get(module, []) + parents:
                if imported in paths:
                    continue
                paths[imported] = paths[module] + [imported]
                if any(_under(imported, prefix) for prefix in TENSORFLOW):
                    problems.append(" -> ".join(paths[imported]))
                elif imported in module_level or _under(imported, "tfdiag"):
                    frontier.append(imported)
    return problems


def private_reaches(root: Path) -> list[tuple[str, int, str]]:
    """``(module, line, what)`` for each private name a module outside ``PRIVATE_STATE_HOMES``
    reaches on another object or module: ``obj._name`` or ``getattr(obj, "_name")`` where
    ``obj`` is not ``self`` or ``cls``, ``from module import _name``, and any import of
    ``PRIVATE_PACKAGES``."""
    found = []
    for name, path in sorted(module_files(package_dirs(root)).items()):
        if name not in PRIVATE_STATE_HOMES:
            tree = ast.parse(path.read_text(), filename=str(path))
            found.extend((name, node.lineno, what) for node in ast.walk(tree) for what in _private_names(node))
    return found


def private_accesses(root: Path) -> list[str]:
    """One sentence per private name reached outside ``PRIVATE_STATE_HOMES`` and not allowed."""
    return [f"{name} (line {line}) reaches {what}: only {' or '.join(PRIVATE_STATE_HOMES)} may"
            for name, line, what in private_reaches(root) if what not in PRIVATE_NAMES_ALLOWED]


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_names(node: ast.AST) -> list[str]:
    """The private names one node reaches: ``owner._name``, or a dotted module path."""
    if isinstance(node, ast.Attribute):
        return _private_attribute(node.value, node.attr)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) >= 2 and \
            node.func.id in ("getattr", "setattr", "hasattr", "delattr") and isinstance(node.args[1], ast.Constant):
        return _private_attribute(node.args[0], str(node.args[1].value))
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        names = [f"{'.' * node.level}{node.module or ''}.{alias.name}" for alias in node.names]
    else:
        return []
    return [name for name in names
            if _private(name.rpartition(".")[2]) or any(_under(name, package) for package in PRIVATE_PACKAGES)]


def _private_attribute(owner: ast.expr, attribute: str) -> list[str]:
    if not _private(attribute) or (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
        return []
    return [f"{ast.unparse(owner)}.{attribute}"]


def import_cycles(imports: list[Import]) -> list[str]:
    """A cycle among tfdiag modules (imports at any level), or nothing."""
    graph: dict[str, set[str]] = {}
    for edge in imports:
        if _under(edge.imported, "tfdiag") and edge.imported != edge.importer:
            graph.setdefault(edge.importer, set()).add(edge.imported)
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as error:
        return [" -> ".join(error.args[1])]
    return []


@pytest.fixture(scope="module")
def repo_imports():
    return all_imports(ROOT)


def test_the_parser_sees_the_project(repo_imports):
    importers = {edge.importer for edge in repo_imports}
    assert {"tfdiag.cli", "tfdiag.analysis.engine", "tfdiag.collectors.hook", "tfdiag.tb_plugin.plugin",
            "tfdiag.sample_jobs.launcher"} <= importers
    lazy = [edge for edge in repo_imports if edge.imported == "tensorflow" and not edge.module_level]
    assert lazy, "the collectors' and sample jobs' lazy TensorFlow imports were not found"


def test_every_room_keeps_to_its_imports(repo_imports):
    assert rule_violations(repo_imports) == []


def test_the_analysis_side_starts_without_tensorflow(repo_imports):
    assert heavy_imports_at_start(repo_imports) == []


def test_no_import_cycles(repo_imports):
    assert import_cycles(repo_imports) == []


def test_tensorflow_private_state_is_reached_through_tf_internals_only():
    assert private_accesses(ROOT) == []


def test_every_allowed_private_name_is_still_reached():
    reached = {what for _, _, what in private_reaches(ROOT)}
    assert set(PRIVATE_NAMES_ALLOWED) - reached == set(), "an allowance nothing needs any more"


# -- each check fails on a tree that breaks its rule -------------------------------------

def _project(tmp_path: Path, files: dict[str, str]) -> Path:
    """A tiny project laid out like this one (same package-dir mapping), with these files."""
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    for folder in package_dirs(ROOT).values():
        (tmp_path / folder.relative_to(ROOT)).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder.relative_to(ROOT) / "__init__.py").write_text("")
    for relative, text in files.items():
        (tmp_path / relative).write_text(text)
    return tmp_path


def _tree(tmp_path: Path, files: dict[str, str]) -> list[Import]:
    return all_imports(_project(tmp_path, files))


BROKEN_TREES = {
    "analysis imports TensorFlow lazily": (
        {"src/tfdiag/analysis/engine.py": "def analyze():\n    import tensorflow as tf\n"},
        rule_violations, "tfdiag.analysis.engine (line 2) imports tensorflow"),
    "a collector imports TensorFlow at import time": (
        {"src/tfdiag/collectors/system.py": "import psutil\nimport tensorflow as tf\n"},
        rule_violations, "tfdiag.collectors.system (line 2) imports tensorflow"),
    "the record contract imports the store": (
        {"src/tfdiag/events.py": "from tfdiag.store import writer\n"},
        rule_violations, "tfdiag.events (line 1) imports tfdiag.store"),
    "a renderer imports a collector (relative import)": (
        {"src/tfdiag/report/text.py": "from ..collectors import hook\n", "src/tfdiag/collectors/hook.py": ""},
        rule_violations, "tfdiag.report.text (line 1) imports tfdiag.collectors"),
    "the live-findings thread imports the analysis at module level": (
        {"src/tfdiag/collectors/live_thread.py": "from tfdiag.analysis.live_monitor import LiveMonitor\n"},
        rule_violations, "tfdiag.collectors.live_thread (line 1) imports tfdiag.analysis.live_monitor"),
    "another collector imports the live analysis lazily": (
        {"src/tfdiag/collectors/system.py": "def sample():\n    from tfdiag.analysis.live_monitor import LiveMonitor\n"},
        rule_violations, "tfdiag.collectors.system (line 2) imports tfdiag.analysis.live_monitor"),
    "the live-findings thread imports more of the analysis": (
        {"src/tfdiag/collectors/live_thread.py": "def run():\n    from tfdiag.analysis import engine\n"},
        rule_violations, "tfdiag.collectors.live_thread (line 2) imports tfdiag.analysis: "),
    "the CLI reaches TensorFlow through analysis": (
        {"src/tfdiag/cli.py": "from tfdiag.analysis import engine\n",
         "src/tfdiag/analysis/engine.py": "from tfdiag.analysis import gpu\n", "src/tfdiag/analysis/gpu.py": "import keras\n"},
        heavy_imports_at_start, "tfdiag.cli -> tfdiag.analysis.engine -> tfdiag.analysis.gpu -> keras"),
    "two modules import each other": (
        {"src/tfdiag/analysis/findings.py": "from tfdiag.analysis.detectors import KINDS\n",
         "src/tfdiag/analysis/detectors/__init__.py": "def kinds():\n    from tfdiag.analysis import findings\n"},
        import_cycles, "tfdiag.analysis.findings"),
}


PRIVATE_STATE_TREES = {
    "a sample job imports tensorflow.python": (
        {"src/tfdiag/sample_jobs/common.py": "def sleep():\n    from tensorflow.python.data.experimental.ops import testing\n"},
        "tfdiag.sample_jobs.common (line 2) reaches tensorflow.python.data.experimental.ops.testing"),
    "a sample job reads a strategy's private attribute": (
        {"src/tfdiag/sample_jobs/ps_ctl.py": "def count(strategy):\n    return strategy.extended._num_ps\n"},
        "tfdiag.sample_jobs.ps_ctl (line 2) reaches strategy.extended._num_ps"),
    "a collector sets a private attribute": (
        {"src/tfdiag/collectors/callback.py": "def wire(model, coordinator):\n    model._cluster_coordinator = coordinator\n"},
        "tfdiag.collectors.callback (line 2) reaches model._cluster_coordinator"),
    "a collector reads private state through getattr": (
        {"src/tfdiag/collectors/live_thread.py": "def model_of(callback):\n    return getattr(callback, '_model', None)\n"},
        "tfdiag.collectors.live_thread (line 2) reaches callback._model"),
    "the plugin imports tf_keras's sources": (
        {"src/tfdiag/tb_plugin/plugin.py": "import tf_keras.src.engine.training\n"},
        "tfdiag.tb_plugin.plugin (line 1) reaches tf_keras.src.engine.training"),
    "a renderer imports another module's private helper": (
        {"src/tfdiag/report/text.py": "from ..analysis.engine import _measure\n"},
        "tfdiag.report.text (line 1) reaches ..analysis.engine._measure"),
}


@pytest.mark.parametrize("files, expected", PRIVATE_STATE_TREES.values(), ids=PRIVATE_STATE_TREES.keys())
def test_the_private_state_check_finds_its_violation(tmp_path, files, expected):
    problems = private_accesses(_project(tmp_path, files))
    assert any(problem.startswith(expected) for problem in problems), problems


@pytest.mark.parametrize("files, check, expected", BROKEN_TREES.values(), ids=BROKEN_TREES.keys())
def test_each_check_finds_its_violation(tmp_path, files, check, expected):
    problems = check(_tree(tmp_path, files))
    assert any(expected in problem for problem in problems), problems


def test_a_tree_that_keeps_the_rules_passes_every_check(tmp_path):
    imports = _tree(tmp_path, {
        "src/tfdiag/analysis/engine.py": "from tfdiag.store import reader\nfrom tfdiag import events\n",
        "src/tfdiag/collectors/callback.py": "def begin():\n    import tensorflow as tf\n",
        "src/tfdiag/collectors/hook.py": "import tensorflow as tf\n",
        "src/tfdiag/collectors/live_thread.py": "def run():\n    from tfdiag.analysis.live_monitor import LiveMonitor\n",
    })
    assert imports and rule_violations(imports) == heavy_imports_at_start(imports) == import_cycles(imports) == []


def test_a_tree_that_reaches_private_state_through_tf_internals_passes(tmp_path):
    root = _project(tmp_path, {
        "src/tfdiag/collectors/tf_internals.py": ("def sleep(strategy):\n    from tensorflow.python.data.experimental.ops import testing\n"
                                       "    return strategy.extended._num_ps, getattr(strategy, '_cluster_resolver')\n"),
        "src/tfdiag/collectors/tf_formats.py": "from tensorflow.python.framework import text_format\n",
        "src/tfdiag/collectors/callback.py": ("class Callback:\n    def begin(self):\n        self._model = getattr(self, '_x', None)\n"
                                   "        return type(self).__name__, os._exit\n"),
    })
    assert private_accesses(root) == []
