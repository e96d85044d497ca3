"""The callback HMAC key is its own secret: never the token-signing AGP_AUTH_SECRET (review fix).

Run in a fresh process with AGP_AUTH_SECRET set and AGP_CALLBACK_SECRET unset, as an
operator's deployment would be.
"""

import os
import stat
import subprocess
import sys
from pathlib import Path

import jwt
import pytest
from django.conf import settings as django_settings

from execution.callbacks import callback_signature_verify
from tests.auth_tokens.helpers import assert_unauthenticated
from tests.conftest import AUTH_SECRET

pytestmark = pytest.mark.system  # each test runs manage.py

ROOT = Path(__file__).resolve().parent.parent.parent


def run_manage(var_dir, *args):
    env = {k: v for k, v in os.environ.items()
           if k not in ("AGP_CALLBACK_SECRET", "AGP_DJANGO_SECRET_KEY", "DJANGO_SETTINGS_MODULE")}
    env.update(AGP_AUTH_SECRET=AUTH_SECRET, AGP_VAR_DIR=str(var_dir))
    result = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=60, check=True)
    return result.stdout.strip()


SIGN_SNIPPET = ("from execution.callbacks import callback_signature; from django.conf import settings; "
                "print(callback_signature(body=b'{\"id\":\"op_1\"}', timestamp=1700000000)); "
                "print(settings.SECRET_KEY)")


def test_it_generates_a_callback_secret_apart_from_the_auth_secret_and_prints_it(tmp_path):
    printed = run_manage(tmp_path, "callback_secret")

    assert printed and printed != AUTH_SECRET
    assert (tmp_path / "callback-secret").read_text() == printed
    assert stat.S_IMODE((tmp_path / "callback-secret").stat().st_mode) == 0o600
    # A second process (the worker) reads the same secret.
    assert run_manage(tmp_path, "callback_secret") == printed
    header, secret_key = run_manage(tmp_path, "shell", "-c", SIGN_SNIPPET).splitlines()[-2:]
    assert callback_signature_verify(header=header, body=b'{"id":"op_1"}', secret=printed, now=1700000001)
    assert secret_key not in (AUTH_SECRET, printed, "agp-insecure-embedded-default")
    assert (tmp_path / "django-secret-key").read_text() == secret_key
    assert stat.S_IMODE((tmp_path / "django-secret-key").stat().st_mode) == 0o600


def test_it_rejects_a_token_signed_with_the_callback_secret(tmp_path, api, make_token):
    printed = run_manage(tmp_path, "callback_secret")
    genuine = make_token()
    claims = jwt.decode(genuine, AUTH_SECRET, algorithms=["HS256"], options={"verify_aud": False})
    forged = jwt.encode(claims, printed, algorithm="HS256")

    api.credentials(HTTP_AUTHORIZATION=f"Bearer {forged}")
    response = api.get("/agp/tasks")

    assert_unauthenticated(response)
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {genuine}")
    assert api.get("/agp/tasks").status_code == 200
    assert django_settings.AGP_CALLBACK_SECRET != AUTH_SECRET
