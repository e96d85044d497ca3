"""A writer process for the sequencer's fault tests:
``python -m tests.core.ledger_writer SECONDS INDEX STOP_FILE``.

Writes for SECONDS from when it is connected, or until STOP_FILE exists: then it ends the
change in flight and exits 0.

Each change is a row of ``fault_change`` and its ledger event, written in one transaction
through the service's append. A terminated connection is reconnected and the writing goes
on: whether the change in flight then committed is for the database to say, not the writer.
"""

import sys
import time
from pathlib import Path

import django


def main() -> None:
    seconds, index, stop_file = float(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    django.setup()
    from django.db import DatabaseError, connection, transaction

    from core.ledger import ledger_append

    connection.ensure_connection()
    stop = time.time() + seconds  # from when the process is ready: starting is slow on a busy machine
    n = 0
    while time.time() < stop and not stop_file.exists():

        change = f"w{index}-{n}"
        n += 1
        try:
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("INSERT INTO fault_change (id) VALUES (%s)", [change])
                ledger_append(event_type="fault.change", resource_type="FaultChange", resource_id=change,
                              actor="writer")
        except DatabaseError:
            connection.close()
            time.sleep(0.05)


if __name__ == "__main__":
    main()
