"""No code uses a private name (one with a leading underscore) of a dependency.

Django, DRF, psycopg, Celery, kombu, urllib3, requests, the standard library: anything not
in this repository. A private name is not part of its package's contract and may change in
any release. Checked over every Python file of the repository (the service, its client,
tests, benchmark, examples):

- no import of a private name or from a private module (``from psycopg import _queries``);
- no private attribute read, written or called on something imported from a dependency
  (``connection._cursor()``), nor on any other object unless this repository defines that
  name itself (``request._request``, ``serializer._errors``); ``getattr`` with a literal
  name counts too. What this repository stores on objects it does not own is named
  ``_agp_...``, so it cannot be taken for a dependency's name;
- no method or property of the service's classes (or its client's) that overrides a
  dependency's private one (``_new_conn`` in a urllib3 connection subclass).

And tests aim at behaviour: none imports or reaches a private helper of the service or of
its client (``selectors._chain_rows``, ``monkeypatch.setattr(outbox, "_publish", ...)``).

Documented exceptions: Django's model API ``Model._meta``, ``Model._state``,
``_default_manager`` and ``_base_manager``, and the ``namedtuple`` methods ``_replace``,
``_asdict``, ``_fields`` and ``_make``.
"""

import ast
import importlib
import os
import pkgutil
from pathlib import Path

import pytest
from urllib3.connection import HTTPConnection

ROOT = Path(__file__).resolve().parents[2]
SKIPPED_DIRS = {"var", "test-artifacts", "node_modules", "__pycache__"}
DOCUMENTED = {"_meta", "_state", "_default_manager", "_base_manager", "_replace", "_asdict", "_fields", "_make"}
# The packages whose classes are imported and checked for overrides (the service and its client).
SERVICE_PACKAGES = ["agp_project", "core", "auth_tokens", "registry", "decision", "execution", "auditing",
                    "agp_client"]
NAME_FUNCTIONS = {"getattr", "setattr", "hasattr", "delattr"}


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def python_files() -> list[Path]:
    found = []
    for directory, subdirectories, files in os.walk(ROOT):
        subdirectories[:] = [name for name in subdirectories if not name.startswith(".") and name not in SKIPPED_DIRS]
        found += [Path(directory, name) for name in files if name.endswith(".py")]
    return sorted(found)


FIRST_PARTY = {path.name for path in ROOT.iterdir()
               if path.is_dir() and not path.name.startswith(".") and path.name not in SKIPPED_DIRS
               and any(path.rglob("*.py"))}


# What this repository stores on objects it does not own (a request, a row) starts with this.
OWN_PREFIX = "_agp_"


class OwnNames:
    """The private names this repository defines: ``attributes`` (methods, class attributes,
    attributes assigned on ``self``, and ``_agp_`` ones stored on other objects) and
    ``module_level`` (functions, classes, variables, and the attributes)."""

    def __init__(self, trees: list[ast.AST]):
        self.attributes, self.module_level = set(), set()
        for tree in trees:
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    for item in node.body:
                        targets = (item.targets if isinstance(item, ast.Assign)
                                   else [item.target] if isinstance(item, ast.AnnAssign) else [])
                        self.attributes.update(target.id for target in targets if isinstance(target, ast.Name))
                        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                            self.attributes.add(item.name)
                elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and (
                        (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
                        or node.attr.startswith(OWN_PREFIX)):
                    self.attributes.add(node.attr)
                elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr"
                      and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
                      and str(node.args[1].value).startswith(OWN_PREFIX)):
                    self.attributes.add(str(node.args[1].value))
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    self.module_level.add(node.name)
                elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    self.module_level.add(node.id)
        self.attributes = {name for name in self.attributes if is_private(name)}
        self.module_level = {name for name in self.module_level if is_private(name)} | self.attributes


def private_uses(source: str | ast.AST, *, own: OwnNames, where: str = "<source>") -> list[str]:
    """Each use of a dependency's private name in ``source``, as ``where:line: what``.

    A private attribute of something imported from this repository may be any name the
    repository defines; of any other object (a parameter, a call's result), only a name the
    repository defines as an attribute or method.
    """
    tree = ast.parse(source) if isinstance(source, str) else source
    local = OwnNames([tree])
    attributes, module_level = own.attributes | local.attributes, own.module_level | local.module_level
    found = []
    imported, imported_own = set(), set()  # local names bound to a dependency's (our own) module or object

    def report(node: ast.AST, what: str) -> None:
        found.append(f"{where}:{node.lineno}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound = alias.asname or alias.name.split(".")[0]
                if alias.name.split(".")[0] in FIRST_PARTY:
                    imported_own.add(bound)
                    continue
                if any(is_private(part) for part in alias.name.split(".")):
                    report(node, f"import {alias.name}")
                imported.add(bound)
        elif isinstance(node, ast.ImportFrom):
            if node.level or (node.module or "").split(".")[0] in FIRST_PARTY:
                imported_own.update(alias.asname or alias.name for alias in node.names)
                continue
            for alias in node.names:
                if any(is_private(part) for part in node.module.split(".")) or is_private(alias.name):
                    report(node, f"from {node.module} import {alias.name}")
                imported.add(alias.asname or alias.name)

    def check(node: ast.AST, base: ast.AST, name: str) -> None:
        if not is_private(name) or name in DOCUMENTED:
            return
        root = base
        while isinstance(root, ast.Attribute | ast.Call | ast.Subscript):
            root = root.func if isinstance(root, ast.Call) else root.value
        if isinstance(root, ast.Name) and root.id in imported:
            report(node, f"{ast.unparse(base)}.{name} (imported from a dependency)")
        elif isinstance(root, ast.Name) and root.id in imported_own and base is root:
            if name not in module_level:
                report(node, f"{ast.unparse(base)}.{name}")
        elif name not in attributes:
            report(node, f"{ast.unparse(base)}.{name}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            check(node, node.value, node.attr)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in NAME_FUNCTIONS
              and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
              and isinstance(node.args[1].value, str)):
            check(node, node.args[0], node.args[1].value)
    return found


def private_overrides(cls: type) -> list[str]:
    """The private methods and properties written here that override a dependency's in ``cls``'s MRO
    (defined on ``cls`` itself or on a mixin of ours that comes before the dependency's class)."""
    found = []
    mro = cls.__mro__
    for index, owner in enumerate(mro):
        if owner.__module__.split(".")[0] not in FIRST_PARTY:
            continue
        for name, value in vars(owner).items():
            if not is_private(name) or name in DOCUMENTED:
                continue
            function = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
            if str(getattr(function, "__module__", "")).split(".")[0] not in FIRST_PARTY:
                continue  # set by a metaclass or a decorator of the dependency, not written here
            found += [f"{owner.__module__}.{owner.__qualname__}.{name} overrides "
                      f"{base.__module__}.{base.__qualname__}.{name}"
                      for base in mro[index + 1:]
                      if base.__module__.split(".")[0] not in FIRST_PARTY and name in vars(base)]
    return found


def service_classes() -> list[type]:
    classes = []
    for package_name in SERVICE_PACKAGES:
        package = importlib.import_module(package_name)
        modules = [package] + [importlib.import_module(info.name)
                               for info in pkgutil.walk_packages(package.__path__, f"{package_name}.")
                               if info.name != "agp_project.settings.production"]
        for module in modules:
            # type(value), not isinstance: a Celery task proxy resolves its __class__ lazily.
            classes += [value for value in vars(module).values()
                        if issubclass(type(value), type) and value.__module__ == module.__name__]
    return classes


@pytest.fixture(scope="module")
def sources() -> dict[Path, ast.AST]:
    """Every Python file of the repository, parsed."""
    return {path: ast.parse(path.read_text(encoding="utf-8"), str(path)) for path in python_files()}


@pytest.fixture(scope="module")
def own(sources) -> OwnNames:
    return OwnNames(list(sources.values()))


def test_no_file_uses_a_private_name_of_a_dependency(sources, own):
    found = [use for path, source in sources.items()
             for use in private_uses(source, own=own, where=str(path.relative_to(ROOT)))]
    assert found == []


def test_no_class_of_the_service_overrides_a_private_name_of_a_dependency():
    classes = service_classes()
    assert len(classes) > 200  # every module was imported
    assert [found for cls in classes for found in private_overrides(cls)] == []


def private_helpers_used(source: str | ast.AST, *, where: str = "<source>") -> list[str]:
    """Each private name of the service (or its client) that ``source`` imports or reaches
    through an imported module or object: tests aim at behaviour, not at private helpers."""
    tree = ast.parse(source) if isinstance(source, str) else source
    found, imported = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] in SERVICE_PACKAGES:
            for alias in node.names:
                if is_private(alias.name) or any(is_private(part) for part in node.module.split(".")):
                    found.append(f"{where}:{node.lineno}: from {node.module} import {alias.name}")
                imported.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            imported.update(alias.asname or alias.name.split(".")[0] for alias in node.names
                            if alias.name.split(".")[0] in SERVICE_PACKAGES)
    for node in ast.walk(tree):
        name, base = None, None
        if isinstance(node, ast.Attribute):
            name, base = node.attr, node.value
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name)
              and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) in NAME_FUNCTIONS
              and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)):
            name, base = str(node.args[1].value), node.args[0]
        if name and is_private(name) and name not in DOCUMENTED:
            root = base
            while isinstance(root, ast.Attribute | ast.Call | ast.Subscript):
                root = root.func if isinstance(root, ast.Call) else root.value
            if isinstance(root, ast.Name) and root.id in imported:
                found.append(f"{where}:{node.lineno}: {ast.unparse(base)}.{name}")
    return found


def test_no_test_reaches_for_a_private_helper_of_the_service(sources):
    found = [use for path, source in sources.items() if path.relative_to(ROOT).parts[0] == "tests"
             for use in private_helpers_used(source, where=str(path.relative_to(ROOT)))]
    assert found == []


@pytest.mark.parametrize("source", [
    "from agp_project.canonical import _fast_subset",
    "from registry import selectors\nselectors._chain_rows([1])",
    "from core import outbox\ndef test(monkeypatch):\n    monkeypatch.setattr(outbox, '_publish', None)",
    "from agp_client import AGPClient\nAGPClient('x').auth._token",
])
def test_the_helper_scan_finds_a_private_helper_of_the_service(source):
    assert private_helpers_used(source)


@pytest.mark.parametrize("source", [
    "from django.db import connection\nconnection._cursor()",
    "import django.db\ndjango.db.connection._cursor()",
    "from rest_framework.fields import _UnvalidatedField",
    "from psycopg._queries import _query2pg",
    "import psycopg._queries",
    "from agp_project.celery import app\nx = app.amqp\nx._producer_pool = None",
    "def view(request):\n    return request._request",
    "def view(serializer):\n    return serializer._errors",
    "def view(request):\n    return getattr(request, '_request')",
    "from django.contrib import admin\nadmin.site._registry.items()",
    "from celery import current_app\ncurrent_app.conf._x = 1",
])
def test_the_scan_finds_a_private_name_of_a_dependency(source, own):
    assert private_uses(source, own=own)


@pytest.mark.parametrize("source", [
    "from registry.models import Task\nTask._meta.label",
    "from registry.models import Task\nTask._default_manager.count()",
    "from urllib.parse import urlsplit\nurlsplit('http://x')._replace(path='/')",
    "from agp_project import net\nnet._resolve",
    "class A:\n    def _own(self):\n        return self._own()",
])
def test_the_scan_passes_public_and_own_names(source, own):
    assert private_uses(source, own=own) == []


def test_the_override_check_finds_a_private_method_of_a_dependency():
    def method(self):
        return None

    guarded = type("GuardedConnection", (HTTPConnection,), {"_new_conn": method, "__module__": "agp_project.x"})
    mixin = type("PeerCheck", (), {"_new_conn": method, "__module__": "agp_project.x"})
    mixed = type("MixedConnection", (mixin, HTTPConnection), {"__module__": "agp_project.x"})
    plain = type("Plain", (HTTPConnection,), {"_helper": method, "__module__": "agp_project.x"})
    assert private_overrides(guarded) == [
        "agp_project.x.GuardedConnection._new_conn overrides urllib3.connection.HTTPConnection._new_conn"]
    assert private_overrides(mixed) == [
        "agp_project.x.PeerCheck._new_conn overrides urllib3.connection.HTTPConnection._new_conn"]
    assert private_overrides(plain) == []
