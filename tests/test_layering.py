"""The package's layering, read from its source: no import cycles between modules, and no
import from a stage into a later one (``STAGES``, in the order data flows; ``core`` is shared
by all). Every ``import`` counts, at module level or inside a function: a lazy import hides a
dependency from Python's start-up, not from the design.
"""

import ast
import shutil
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

import qbench

STAGES = (
    "core",
    "model",
    "data",
    "calibration",
    "quantize",
    "compile",
    "measure",
    "signoff",
    "report",
    "baseline",
    "diagnose",
    "pipeline",
    "cli",
)
PACKAGE = Path(qbench.__file__).parent


def module_name(root, path):
    """``qbench.a.b`` for ``root/a/b.py`` and ``qbench.a`` for ``root/a/__init__.py``."""
    parts = ["qbench", *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(node, name, is_package):
    """The absolute names an import statement ``node`` of module ``name`` reads, or the
    constant name ``importlib.import_module("qbench...")`` reads; [] for other nodes."""
    if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module":
        first = node.args[0] if node.args else None
        return [first.value] if isinstance(first, ast.Constant) and first.value else []
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    package = name.split(".") if is_package else name.split(".")[:-1]
    base = package[: len(package) - node.level + 1] if node.level else []
    source = ".".join(base + ([node.module] if node.module else []))
    return [source] + [f"{source}.{alias.name}" for alias in node.names]


def import_graph(root):
    """{module: set of qbench modules it imports}, for the package under ``root``. An
    import of ``a.b.c`` also reads the packages ``a.b`` and ``a`` (Python runs their
    ``__init__``), except the importer's own enclosing packages."""
    files = {module_name(root, p): p for p in root.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        is_package = path.name == "__init__.py"
        own = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1 + is_package)}
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for target in _imported(node, name, is_package):
                parts = target.split(".")
                prefixes = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
                deps |= {m for m in prefixes & files.keys() if m not in own}
        graph[name] = deps - {name}
    return graph


ENTRY_POINTS = {"qbench.__main__": "cli"}  # ``python -m qbench``: the command line


def stage_of(module):
    """The stage a module belongs to: its package under ``qbench``; the root is ``core``;
    ``ENTRY_POINTS`` are the command line's."""
    if module in ENTRY_POINTS:
        return ENTRY_POINTS[module]
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in STAGES else "core"


def layering_problems(graph):
    """Sentences naming each cycle and each import from a stage into a later one."""
    problems = []
    for module, deps in sorted(graph.items()):
        for dep in sorted(deps):
            if STAGES.index(stage_of(dep)) > STAGES.index(stage_of(module)):
                problems.append(
                    f"{module} ({stage_of(module)}) imports {dep} from the later stage "
                    f"{stage_of(dep)}"
                )
    return problems + [f"import cycle: {' -> '.join(c)}" for c in cycles(graph)]


def cycles(graph):
    """Import cycles in ``graph``, each as its modules in import order (first = last). After
    each cycle ``graphlib`` finds, one of its edges is dropped and the search goes on, so
    every cycle's modules are named, though not every cycle through the same ones."""
    graph = {m: set(deps) for m, deps in graph.items()}
    found = []
    while True:
        try:
            tuple(TopologicalSorter(graph).static_order())
            return found
        except CycleError as error:
            cycle = error.args[1][::-1]  # graphlib lists it against the import order
            found.append(cycle)
            graph[cycle[0]].discard(cycle[1])


def test_every_module_belongs_to_a_stage():
    graph = import_graph(PACKAGE)
    loose = [m for m in graph if m.count(".") == 1 and stage_of(m) == "core" != m.split(".")[1]]
    assert loose == [], f"modules outside the stage packages {STAGES}: {loose}"


def test_no_import_cycle_and_no_backward_import():
    problems = layering_problems(import_graph(PACKAGE))
    assert problems == [], "\n".join(problems)


def _planted(tmp_path, module, line):
    """A copy of the package with ``line`` appended to ``module`` (a path under it)."""
    root = tmp_path / "qbench"
    shutil.copytree(PACKAGE, root, ignore=shutil.ignore_patterns("__pycache__", "pretuned"))
    with open(root / module, "a") as f:
        f.write(f"\n{line}\n")
    return root


def test_a_planted_cycle_is_found(tmp_path):
    # core/words.py imports core/errors.py's sibling back: errors -> words -> errors
    root = _planted(tmp_path, "core/errors.py", "from .words import plural")
    root_words = root / "core" / "words.py"
    root_words.write_text(root_words.read_text() + "\nfrom .errors import UserError\n")
    problems = layering_problems(import_graph(root))
    assert any(p.startswith("import cycle:") and "qbench.core.errors" in p for p in problems)


def test_a_planted_backward_import_is_found(tmp_path):
    root = _planted(tmp_path, "model/graph.py", "from ..report import tables")
    problems = set(layering_problems(import_graph(root)))
    assert problems - set(layering_problems(import_graph(PACKAGE))) == {
        "qbench.model.graph (model) imports qbench.report from the later stage report",
        "qbench.model.graph (model) imports qbench.report.tables from the later stage report",
    }


def test_a_lazy_import_counts(tmp_path):
    lazy = "def later():\n    from ...cli import main\n    return main"
    root = _planted(tmp_path, "compile/kernels/layout.py", lazy)
    problems = layering_problems(import_graph(root))
    assert any("qbench.compile.kernels.layout (compile) imports qbench.cli" in p for p in problems)


@pytest.mark.parametrize(
    "module, line, expected",
    [
        ("data/hf.py", "import qbench.pipeline.engine", "qbench.pipeline.engine"),
        ("model/zoo.py", "from qbench.measure.runners import TVMRunner", "qbench.measure.runners"),
        ("core/words.py", "importlib.import_module('qbench.cli.main')", "qbench.cli.main"),
    ],
)
def test_absolute_imports_count(tmp_path, module, line, expected):
    root = _planted(tmp_path, module, line)
    assert any(expected in p for p in layering_problems(import_graph(root)))


def _snake(name):
    """``RunOptions`` -> ``run_options``."""
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")


def stage_classes(root):
    """{class name: (stage, set of its attribute names: fields, methods, properties)} of
    the classes defined in the package under ``root``; a name defined in several stages is
    kept at its earliest."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        stage = stage_of(module_name(root, path))
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ClassDef):
                continue
            names = {n.target.id for n in node.body if isinstance(n, ast.AnnAssign)}
            names |= {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
            before = found.get(node.name)
            if before is None or STAGES.index(stage) < STAGES.index(before[0]):
                found[node.name] = (stage, names)
    return found


def _annotation_names(node):
    """Class names an annotation reads (``Prepared``, ``x.Prepared``, ``"Prepared"``)."""
    if node is None:
        return set()
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value.split(".")[-1].split("[")[0]}
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
    }


def _attributes_read(func, param):
    """The attribute names ``func``'s body reads on its parameter ``param``."""
    return {
        n.attr
        for n in ast.walk(func)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == param
    }


def type_seam_problems(root):
    """Sentences naming each function of a stage that takes a later stage's class: by its
    parameter's annotation, by a parameter named for the class (``prepared``) whose
    attributes it reads, or by reading two or more attributes on one parameter that only
    that later class has (a ``p`` read as ``p.split``, ``p.imported``)."""
    classes = stage_classes(root)
    problems = []
    for path in sorted(root.rglob("*.py")):
        module = module_name(root, path)
        stage = STAGES.index(stage_of(module))
        earlier = set().union(*(names for s, names in classes.values() if STAGES.index(s) <= stage))
        later = {c: names for c, (s, names) in classes.items() if STAGES.index(s) > stage}
        for func in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for arg in func.args.args + func.args.kwonlyargs:
                read = _attributes_read(func, arg.arg)
                for cls, names in later.items():
                    typed = cls in _annotation_names(arg.annotation)
                    named = arg.arg == _snake(cls) and read & names
                    own = (read & names) - earlier
                    if typed or named or len(own) >= 2:
                        problems.append(
                            f"{module}.{func.name} takes {cls} (stage {classes[cls][0]}) as "
                            f"{arg.arg!r}" + (f", reading {', '.join(sorted(own))}" if own else "")
                        )
    return problems


def test_no_stage_takes_a_later_stages_type():
    problems = type_seam_problems(PACKAGE)
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize(
    "module, function",
    [
        ("report/tables.py", "def planted(prepared):\n    return prepared.model"),
        ("quantize/plan.py", "def planted(p):\n    return p.split, p.imported"),
        ("measure/speed.py", "def planted(x: 'Prepared'):\n    return x"),
    ],
)
def test_a_planted_later_type_is_found(tmp_path, module, function):
    root = _planted(tmp_path, module, function)
    problems = type_seam_problems(root)
    planted = [p for p in problems if ".planted takes Prepared" in p]
    assert len(planted) == 1 and module.split("/")[0] in planted[0].split(".")[1]
