"""Test settings: the base settings with a fast password hasher, and a broker of their own."""

import atexit
import shutil
import tempfile
from pathlib import Path

from .base import *  # noqa: F403
from .base import CELERY_BROKER_URL

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

if CELERY_BROKER_URL.startswith("sqlite:"):
    # Messages a test publishes with no worker to take them go to a broker file of this
    # process, removed when it ends: never to var/, where the next scripts/serve's worker would
    # find them. Tests that run a worker give it a broker of their own (tests/execution/worker.py).
    broker_folder = Path(tempfile.mkdtemp(prefix="agp-test-broker-"))
    atexit.register(shutil.rmtree, broker_folder, ignore_errors=True)
    CELERY_BROKER_URL = f"sqlite:///{broker_folder / 'broker.sqlite3'}"
