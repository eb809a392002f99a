"""The layering of the package (docs/architecture.md), read from the source's imports.

- The read side (`read/`, `web/`, `plugin`, `cli`) imports nothing of the write side: the two
  meet only in `metadata`.
- The write side imports nothing of the read side.
- On the read side, `read/` (what the plugin and the report share) imports neither the
  plugin's HTTP layer `web/` nor `plugin`; HTTP (werkzeug, TensorBoard's http_util and
  json_util) is used only in `web/`.
- No module imports another's private names; private TensorFlow API is used only in
  `tf_write/tf_private.py`, private TensorBoard API on the read side only in
  `read/tb_private.py`.
- The judgement (`judgement/`), which both sides apply, imports nothing of the package but
  `metadata` (and itself), and no third-party module but numpy.
- No import circle, in the package or in the frontend's TypeScript modules.
"""

from __future__ import annotations

import ast
import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "tb_wur_plugin"
READ_SIDE = ("read", "web", "plugin", "cli")
WRITE_SIDE = ("tf_write", "keras_backends", "arrays", "event_write", "torch_internals", "armijo",
              "compat", "writer", "torch", "jax", "keras", "wur_summary", "transformers",
              "lightning")
SHARED = ("metadata", "_optional", "judgement")
# TensorBoard's HTTP helpers (besides werkzeug): only the HTTP layer `web/` uses them.
HTTP_MODULES = ("tensorboard.backend.http_util", "tensorboard.backend.json_util")


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(path: pathlib.Path) -> list[tuple[str, list[str], int]]:
    """(module, names imported from it, line) of every import in the file, wherever it is."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.extend((alias.name, [], node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.module, [alias.name for alias in node.names], node.lineno))
    return found


def _package_edges(module: str) -> set[str]:
    """The package modules `module` imports (a `from P import m` of a submodule counts as m)."""
    edges = set()
    for target, names, _ in _imports(MODULES[module]):
        if not target.startswith("tb_wur_plugin"):
            continue
        submodules = [f"{target}.{n}" for n in names if f"{target}.{n}" in MODULES]
        edges.update(submodules or [target])
    return edges - {module}


def _side(module: str) -> str | None:
    top = module.split(".")[1] if "." in module else ""
    if top in READ_SIDE:
        return "read"
    if top in WRITE_SIDE:
        return "write"
    return None


def test_the_package_has_the_layout_the_docs_draw():
    tops = {m.split(".")[1] for m in MODULES if "." in m}
    assert tops == set(READ_SIDE) | set(WRITE_SIDE) | set(SHARED)


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _side(m)))
def test_read_and_write_sides_meet_only_in_metadata(module):
    side = _side(module)
    crossing = sorted(
        target for target in _package_edges(module)
        if _side(target) not in (None, side)
    )
    assert not crossing, f"{module} ({side} side) imports {crossing}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("tb_wur_plugin.read.")))
def test_the_shared_read_modules_import_nothing_of_the_http_layer(module):
    upward = sorted(
        target for target in _package_edges(module)
        if target == "tb_wur_plugin.plugin" or target.startswith("tb_wur_plugin.web")
    )
    assert not upward, f"{module} imports {upward}"


def _uses_http(module: str) -> bool:
    """Whether `module` imports werkzeug or one of HTTP_MODULES."""
    return any(
        target.split(".")[0] == "werkzeug" or target in HTTP_MODULES
        or any(f"{target}.{name}" in HTTP_MODULES for name in names)
        for target, names, _ in _imports(MODULES[module])
    )


def test_http_is_used_only_in_the_web_layer():
    users = sorted(m for m in MODULES if _uses_http(m))
    assert users and all(m.startswith("tb_wur_plugin.web.") for m in users), users


def test_the_judgement_imports_only_numpy_and_metadata():
    """Both sides apply the judgement: it must stand on the protocol alone."""
    modules = [m for m in MODULES if m.startswith("tb_wur_plugin.judgement")]
    assert "tb_wur_plugin.judgement.judge" in modules
    offences = []
    for module in modules:
        for target, names, line in _imports(MODULES[module]):
            top = target.split(".")[0]
            if top == "tb_wur_plugin":
                targets = _package_edges(module) & (
                    {f"{target}.{n}" for n in names} | {target})
                outside = sorted(t for t in targets if t != "tb_wur_plugin.metadata"
                                 and not t.startswith("tb_wur_plugin.judgement"))
                offences += [f"{module}:{line} imports {t}" for t in outside]
            elif top != "numpy" and top not in sys.stdlib_module_names:
                offences.append(f"{module}:{line} imports {target}")
    assert not offences, offences


def test_no_module_imports_another_modules_private_names():
    offences = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        aliases = {}  # local name -> package module it stands for
        for target, names, line in _imports(path):
            if not target.startswith("tb_wur_plugin"):
                continue
            for name in names:
                if name.startswith("_") and f"{target}.{name}" not in MODULES:
                    offences.append(f"{module}:{line} imports {target}.{name}")
                if f"{target}.{name}" in MODULES:
                    aliases[name] = f"{target}.{name}"
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    if alias.asname and f"{node.module}.{alias.name}" in MODULES:
                        aliases[alias.asname] = f"{node.module}.{alias.name}"
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                    and not node.attr.startswith("__") and isinstance(node.value, ast.Name)
                    and aliases.get(node.value.id, module) != module):
                offences.append(f"{module}:{node.lineno} uses {node.value.id}.{node.attr}")
    assert not offences, offences


def test_private_tensorflow_and_tensorboard_api_stay_in_their_modules():
    offences = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        external = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                if node.module.split(".")[0] in ("tensorflow", "tensorboard"):
                    external.update(a.asname or a.name for a in node.names)
                    if node.module.startswith("tensorflow.python") and module != "tb_wur_plugin.tf_write.tf_private":
                        offences.append(f"{module}:{node.lineno} imports {node.module}")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] in ("tensorflow", "tensorboard"):
                        external.add(a.asname or a.name.split(".")[0])
        if module in ("tb_wur_plugin.tf_write.tf_private", "tb_wur_plugin.read.tb_private"):
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                    and not node.attr.startswith("__") and isinstance(node.value, ast.Name)
                    and node.value.id in external):
                offences.append(f"{module}:{node.lineno} uses {node.value.id}.{node.attr}")
    assert not offences, offences


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return out


def test_no_import_circle_in_the_package():
    graph = {m: {t for t in _package_edges(m) if t in MODULES} for m in MODULES}
    assert _cycles(graph) == []


def test_no_import_circle_in_the_frontend():
    source = ROOT / "frontend" / "src"
    pattern = re.compile(r"""(?:from\s+|import\s*\(\s*)["']\./([\w-]+)["']""")
    graph = {
        path.stem: set(pattern.findall(path.read_text(encoding="utf-8")))
        for path in source.glob("*.ts")
    }
    assert graph, "no TypeScript module found"
    assert _cycles(graph) == []


def test_the_checks_see_a_circle_and_a_crossing():
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert _side("tb_wur_plugin.read.report") == "read"
    assert _side("tb_wur_plugin.tf_write.watch") == "write"
    assert "tb_wur_plugin.metadata" in _package_edges("tb_wur_plugin.read.run_data")
    assert "tb_wur_plugin.web.heatmap_wire" in _package_edges("tb_wur_plugin.web.answers")
    assert _uses_http("tb_wur_plugin.web.routes") and not _uses_http("tb_wur_plugin.read.export")
