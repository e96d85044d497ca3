"""Test settings: the base settings with a fast password hasher, and a broker of their own."""

import atexit
import shutil
import tempfile
from pathlib import Path

from .base import *  # noqa: F403
from .base import CELERY_BROKER_URL
from .env import env_bool

# Tests run inside a transaction each: an event written there could never pass the
# sequencer's horizon, so by default events are chained in their transaction, as on SQLite.
# The sequencer's own tests turn it on (tests/core/test_sequencer.py).
AGP_LEDGER_SEQUENCER = env_bool("AGP_LEDGER_SEQUENCER", False)

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

if CELERY_BROKER_URL.startswith("sqlite:"):
    # Messages a test publishes with no worker to take them go to a broker file of this
    # process, removed when it ends: never to var/, where the next scripts/serve's worker would
    # find them. Tests that run a worker give it a broker of their own (tests/execution/worker.py).
    broker_folder = Path(tempfile.mkdtemp(prefix="agp-test-broker-"))
    atexit.register(shutil.rmtree, broker_folder, ignore_errors=True)
    CELERY_BROKER_URL = f"sqlite:///{broker_folder / 'broker.sqlite3'}"
