"""The embedded broker hands consumers every message whole while producers write."""

import threading

import pytest
from kombu import Connection

from agp_project.broker import Transport

pytestmark = pytest.mark.unit

MESSAGES = 300


def test_a_consumer_polling_while_producers_write_reads_every_message_once_and_whole(tmp_path):
    url = f"sqlite:///{tmp_path / 'broker.sqlite3'}"

    def produce(start: int) -> None:
        with Connection(url, transport=Transport) as connection:
            queue = connection.SimpleQueue("work")
            for number in range(start, MESSAGES, 3):
                queue.put({"n": number, "padding": "x" * 2000})
            queue.close()

    producers = [threading.Thread(target=produce, args=(start,)) for start in range(3)]
    for thread in producers:
        thread.start()
    received = []
    with Connection(url, transport=Transport) as connection:
        queue = connection.SimpleQueue("work")
        while len(received) < MESSAGES:
            message = queue.get(timeout=30)  # a half-written message would not decode here
            received.append(message.payload["n"])
            message.ack()
        queue.close()
    for thread in producers:
        thread.join()
    assert sorted(received) == list(range(MESSAGES))
