"""The production settings refuse to start without the names the service answers to
(docs/configuration.md): ``manage.py check`` under them, in a clean environment."""

import os
import subprocess
import sys

import pytest

from tests.agp_client.server import REPO


def _check_with(env: dict[str, str]) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AGP_") and k != "DJANGO_SETTINGS_MODULE"}
    return subprocess.run([sys.executable, "manage.py", "check"], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env={**clean, "DJANGO_SETTINGS_MODULE": "agp_project.settings.production",
                                            **env})


@pytest.mark.system
def test_production_settings_refuse_to_start_without_a_base_url_or_allowed_hosts(tmp_path):
    var = {"AGP_VAR_DIR": str(tmp_path)}
    refused = _check_with(var)
    assert refused.returncode != 0
    assert "Production settings need AGP_BASE_URL" in refused.stderr
    assert _check_with({**var, "AGP_BASE_URL": "https://agp.example"}).returncode == 0
    assert _check_with({**var, "AGP_ALLOWED_HOSTS": "agp.internal"}).returncode == 0
