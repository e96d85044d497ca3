"""The built wheel holds every app of the service, with its templates: installed in a fresh
virtualenv, away from the checkout, each app and the client library import from it."""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from django.conf import settings

from tests.platform.conftest import ROOT

pytestmark = [pytest.mark.system, pytest.mark.embedded]

APPS = [app for app in settings.INSTALLED_APPS if (ROOT / app).is_dir()]
PACKAGES = [*APPS, "agp_project", "agp_client"]


def test_the_wheel_installs_every_app_and_its_templates(tmp_path):
    # Built from a copy of the checkout's files: the build writes build/ and *.egg-info beside its sources.
    source = tmp_path / "source"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.split()
    for name in files:
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                    "--wheel-dir", str(tmp_path / "dist"), str(source)], check=True, timeout=300,
                   capture_output=True)
    [wheel] = (tmp_path / "dist").glob("agp-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    # Without the checkout on PYTHONPATH (scripts/test puts it there), where pip would find the
    # project "already installed" and install nothing.
    clean = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    subprocess.run([venv / "bin" / "python", "-m", "pip", "install", "--no-deps", "--no-index", "--quiet",
                    str(wheel)], check=True, timeout=120, capture_output=True, env=clean)
    probe = ("import importlib, json, pathlib; "
             f"mods = {{name: importlib.import_module(name) for name in {PACKAGES!r}}}; "
             "print(json.dumps({name: str(pathlib.Path(m.__file__).parent) for name, m in mods.items()}))")
    # The dependencies from the test's own environment, the project itself only from the wheel.
    done = subprocess.run([venv / "bin" / "python", "-c", probe], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env={"PYTHONPATH": sysconfig.get_paths()["purelib"],
                                            "DJANGO_SETTINGS_MODULE": "agp_project.settings.base"})

    assert done.returncode == 0, done.stderr
    installed = {name: Path(path) for name, path in json.loads(done.stdout).items()}
    assert all(path.is_relative_to(venv) for path in installed.values()), installed
    for app in APPS:
        templates = {p.relative_to(ROOT / app) for p in (ROOT / app).rglob("templates/**/*.html")}
        assert templates == {p.relative_to(installed[app]) for p in installed[app].rglob("templates/**/*.html")}
