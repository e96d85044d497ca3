"""No class of the service overrides a private name (one with a leading underscore) of a dependency.

A private name is not part of its package's contract and may change in any release. Reading or
importing one is refused by ruff (SLF001, PLC2701; scripts/lint); overriding one, a method or
property of a class of ours that a dependency's class already defines (``_new_conn`` in a urllib3
connection subclass), is found here, on the imported classes. Documented exceptions: Django's
model API ``Model._meta``, ``Model._state``, ``_default_manager`` and ``_base_manager``, and the
``namedtuple`` methods.
"""

import importlib
import pkgutil
from pathlib import Path

import pytest
from urllib3.connection import HTTPConnection

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SKIPPED_DIRS = {"var", "test-artifacts", "node_modules", "__pycache__"}
DOCUMENTED = {"_meta", "_state", "_default_manager", "_base_manager", "_replace", "_asdict", "_fields", "_make"}
# The packages whose classes are imported and checked (the service and its client).
SERVICE_PACKAGES = ["agp_project", "core", "auth_tokens", "registry", "decision", "execution", "gateway", "auditing",
                    "agp_client"]
FIRST_PARTY = {path.name for path in ROOT.iterdir()
               if path.is_dir() and not path.name.startswith(".") and path.name not in SKIPPED_DIRS
               and any(path.rglob("*.py"))}


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


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


def test_no_class_of_the_service_overrides_a_private_name_of_a_dependency():
    classes = service_classes()
    assert len(classes) > 200  # every module was imported
    assert [found for cls in classes for found in private_overrides(cls)] == []


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
