"""What a newcomer's first runs leave behind: the test suite must not make the next
``scripts/serve`` reinstall its dependencies, nor leave it messages to chew on."""

import subprocess
import sysconfig
import venv as venvs
from pathlib import Path

import pytest
from django.conf import settings

from tests.platform.conftest import ROOT, clean_env

pytestmark = [pytest.mark.system, pytest.mark.embedded]


def test_a_start_with_an_external_venv_leaves_the_checkouts_own_install_stamp_alone(tmp_path):
    # A virtualenv of its own that sees this test's packages (every dependency installed), as
    # the tests' scripts/serve uses .venv through AGP_VENV: its install finds everything there
    # and writes nothing but its stamp.
    venv = tmp_path / "venv"
    venvs.create(venv, with_pip=False)
    site_packages = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    (site_packages / "test-packages.pth").write_text(sysconfig.get_path("purelib") + "\n")
    own = venv / ".agp-install-stamp"

    own.write_text("the checkout's own install\n")

    done = subprocess.run(["bash", "-c", 'source scripts/_venv.sh && echo "ready"'], cwd=ROOT,
                          env=clean_env(AGP_VENV=str(venv)), capture_output=True, text=True, timeout=300)

    assert done.returncode == 0, done.stderr
    assert own.read_text() == "the checkout's own install\n"
    assert (venv / ".agp-install-stamp-deps").exists()


def test_the_tests_publish_to_a_broker_of_their_own():
    assert settings.CELERY_BROKER_URL.startswith("sqlite:///")
    assert not Path(settings.CELERY_BROKER_URL.removeprefix("sqlite:///")).is_relative_to(ROOT)

