"""Import contracts of the node package: layers without upward imports, and no
cycles between packages or modules; and no import of the lab harness (``nodegate_lab``, a
distribution of its own that a node never installs).

The graph is read from the source with ``ast``, every import counted, the ones inside
functions too (they hide the real graph, not change it). A package may import its own layer
or lower ones; a new upward import, or a new top-level module missing from ``LAYERS``, fails
here with the edge named. ``test_the_checker_catches_*`` prove the checks can fail.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "src"
LAB_ROOT = Path(__file__).resolve().parents[2] / "lab" / "src"
#: Packages the node package never imports: the lab, its emulators and the synthetic fleet
#: are the nodegate-lab distribution (lab/), installed beside a checkout, never on a node.
FOREIGN = ("nodegate_lab",)
_MODULE_PATH = re.compile(r"[A-Za-z_][\w.]*")

#: Top-level module or package of nodegate -> its layer. Lower layers never import higher ones.
LAYERS: dict[str, int] = {
    # 0: the shared words and errors, imported by everyone
    "vocabulary": 0, "errors": 0,
    # 1: leaf helpers
    "results": 1, "bounds": 1, "paths": 1, "mapping": 1, "fileio": 1, "yamlio": 1, "versions": 1,
    "progress": 1, "secret_refs": 1, "redaction": 1, "flock": 1, "battery_lock": 1,
    "schema_check": 1, "records": 1, "arguments": 1, "collector": 1, "identity": 1,
    "node_secrets": 1,
    "<root>": 1,
    # 2: measuring the board and under load, reading profiles, the simulated board, the report
    "probes": 2, "load": 2, "profiles": 2, "sim": 2, "report": 2,
    # 3: judging (only here)
    "judge": 3,
    # 4: the power path, which calls the judge
    "power": 4,
    # 5: the battery engine, the fleet view, the gate; the control side's inventory and facts
    "battery": 5, "fleet": 5, "cluster": 5, "site": 5, "facts": 5, "pyinfra_compat": 5, "fact_cache": 5, "deploy_interrupt": 5,
    # 5: remediation, which reads the gate's drain reasons and the judge's Xid actions
    "remediation": 5,
    # 6: the fleet ledger (control side), which reads reports through the fleet reader and
    # serves the fleet view from a database
    "ledger": 6,
    # 6: entry points: the command line, and the pytest front end of the battery
    "commands": 6, "cli": 6, "__main__": 6, "testing": 6,
}

Graph = dict[str, set[str]]


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(tree: ast.AST, modules: set[str]) -> Iterator[str]:
    """Every nodegate module ``tree`` imports: ``from pkg import mod`` counts as ``pkg.mod``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                yield full if full in modules else node.module


def module_graph(root: Path, package: str = "nodegate") -> Graph:
    """Module -> the modules of ``package`` it imports, for the tree under ``root/package``."""
    paths = sorted((root / package).rglob("*.py"))
    modules = {_module_name(p, root) for p in paths}
    graph: Graph = defaultdict(set)
    for path in paths:
        name = _module_name(path, root)
        graph[name]
        for imported in _imports(ast.parse(path.read_text(), str(path)), modules):
            target = imported
            while target not in modules and "." in target:  # an attribute: its module
                target = target.rsplit(".", 1)[0]
            if target in modules and target not in (name, package):
                graph[name].add(target)
    return graph


def foreign_imports(root: Path) -> list[str]:
    """Every place under ``root/nodegate`` that imports a ``FOREIGN`` package, as messages: an
    import statement, or a string that is one of its module paths (``importlib``, a command
    registry, ``python -m``), since those import it as surely."""
    problems = []
    for path in sorted((root / "nodegate").rglob("*.py")):
        name = _module_name(path, root)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [node.module]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and _MODULE_PATH.fullmatch(node.value):
                targets = [node.value]
            else:
                continue
            problems += [f"{name}:{node.lineno} imports {target}" for target in targets
                         if target.split(".")[0] in FOREIGN]
    return problems


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "<root>"


def package_graph(graph: Graph) -> Graph:
    packages: Graph = defaultdict(set)
    for source, targets in graph.items():
        packages[_top(source)]
        packages[_top(source)] |= {_top(t) for t in targets} - {_top(source)}
    return packages


def upward_imports(graph: Graph) -> list[str]:
    """Edges from a lower layer to a higher one, and packages with no layer, as messages."""
    problems = []
    for source, targets in sorted(graph.items()):
        here = _top(source)
        if here not in LAYERS:
            problems.append(f"{source}: package {here!r} has no layer in LAYERS")
            continue
        for target in sorted(targets):
            there = _top(target)
            if there in LAYERS and LAYERS[there] > LAYERS[here]:
                problems.append(f"{source} (layer {LAYERS[here]}) imports {target} "
                                f"(layer {LAYERS[there]})")
    return problems


class _Tarjan:
    """Tarjan's strongly connected components over ``graph``, visiting in sorted order."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.index: dict[str, int] = {}
        self.low: dict[str, int] = {}
        self.stack: list[str] = []
        self.on_stack: set[str] = set()
        self.found: list[list[str]] = []

    def visit(self, node: str) -> None:
        self.index[node] = self.low[node] = len(self.index)
        self.stack.append(node)
        self.on_stack.add(node)
        for nxt in sorted(self.graph.get(node, ())):
            if nxt not in self.index:
                self.visit(nxt)
                self.low[node] = min(self.low[node], self.low[nxt])
            elif nxt in self.on_stack:
                self.low[node] = min(self.low[node], self.index[nxt])
        if self.low[node] == self.index[node]:
            self._pop_component(node)

    def _pop_component(self, root: str) -> None:
        """Pop ``root``'s component off the stack; keep it when it is a cycle (2+ nodes)."""
        component = []
        while True:
            top = self.stack.pop()
            self.on_stack.discard(top)
            component.append(top)
            if top == root:
                break
        if len(component) > 1:
            self.found.append(sorted(component))


def cycles(graph: Graph) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    tarjan = _Tarjan(graph)
    for node in sorted(graph):
        if node not in tarjan.index:
            tarjan.visit(node)
    return tarjan.found


def _is_package_init(module: str, graph: Graph) -> bool:
    return any(other.startswith(module + ".") for other in graph)


def _without_package_inits(graph: Graph) -> Graph:
    """A package's ``__init__`` re-exporting its submodules is not a cycle of design: every
    submodule import runs it first anyway. Edges into a package's own ``__init__`` from inside
    it are left out of the module cycle check."""
    return {source: {t for t in targets
                     if not (_is_package_init(t, graph) and source.startswith(t + "."))}
            for source, targets in graph.items()}


# --------------------------------------------------------------------------- the contracts


@cache
def _project_graph() -> Graph:
    return module_graph(ROOT)


def test_no_upward_import() -> None:
    problems = upward_imports(_project_graph())
    assert not problems, "\n".join(problems)


def test_no_cycle_between_packages() -> None:
    assert cycles(package_graph(_project_graph())) == []


def test_no_cycle_between_modules() -> None:
    assert cycles(_without_package_inits(_project_graph())) == []


def test_the_node_package_never_imports_the_lab() -> None:
    assert foreign_imports(ROOT) == []


def test_no_cycle_between_lab_modules() -> None:
    graph = module_graph(LAB_ROOT, "nodegate_lab")
    assert "nodegate_lab.mdvm" in graph  # the lab's tree was read
    assert cycles(_without_package_inits(graph)) == []


def test_judging_lives_in_judge() -> None:
    """Verdicts are built with the judge's helpers; the measuring layers below it never do."""
    graph = _project_graph()
    for source, targets in graph.items():
        if _top(source) in ("probes", "load", "sim", "profiles", "report"):
            assert not any(_top(t) == "judge" for t in targets), source


# --------------------------------------------------------------------------- the checker


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in {"nodegate/__init__.py": "", **files}.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_the_checker_catches_an_upward_import(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "nodegate/judge/__init__.py": "",
        "nodegate/judge/gpu.py": "def f():\n    from nodegate.battery.engine import run\n",
        "nodegate/battery/__init__.py": "",
        "nodegate/battery/engine.py": "from nodegate.judge import gpu\n",
    })
    problems = upward_imports(module_graph(root))
    assert problems == ["nodegate.judge.gpu (layer 3) imports nodegate.battery.engine (layer 5)"]
    assert cycles(package_graph(module_graph(root))) == [["battery", "judge"]]


def test_the_checker_catches_a_module_cycle_and_an_unlayered_package(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "nodegate/load/__init__.py": "",
        "nodegate/load/a.py": "from nodegate.load.b import x\n",
        "nodegate/load/b.py": "import nodegate.load.a\n",
        "nodegate/newthing.py": "",
    })
    graph = module_graph(root)
    assert cycles(_without_package_inits(graph)) == [["nodegate.load.a", "nodegate.load.b"]]
    assert upward_imports(graph) == ["nodegate.newthing: package 'newthing' has no layer in "
                                     "LAYERS"]


def test_the_checker_catches_an_import_of_the_lab(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "nodegate/cli.py": "import importlib\nfrom nodegate_lab.synthetic_fleet import x\n"
                           "def f():\n    import nodegate_lab\n"
                           "    return importlib.import_module('nodegate_lab.cli')\n",
        "nodegate/fleet/__init__.py": "",
        "nodegate/fleet/view.py": "HELP = 'see nodegate_lab for a synthetic fleet'\n"
                                  "from nodegate.fleet import nodegate_lab_free\n",
    })
    assert foreign_imports(root) == [
        "nodegate.cli:2 imports nodegate_lab.synthetic_fleet",
        "nodegate.cli:4 imports nodegate_lab",
        "nodegate.cli:5 imports nodegate_lab.cli",
    ]
