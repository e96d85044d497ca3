"""The embedded broker hands consumers whole messages only, while producers write."""

import threading

from kombu import Connection

from agp_project.broker import Transport

MESSAGES = 1500


def test_a_consumer_polling_while_producers_write_reads_every_message_whole(tmp_path):
    options = {"data_folder_in": str(tmp_path), "data_folder_out": str(tmp_path), "store_processed": False,
               "polling_interval": 0.001}

    def produce(start: int) -> None:
        with Connection("filesystem://localhost/", transport=Transport, transport_options=options) as connection:
            queue = connection.SimpleQueue("work")
            for number in range(start, MESSAGES, 3):
                queue.put({"n": number, "padding": "x" * 2000})
            queue.close()

    producers = [threading.Thread(target=produce, args=(start,)) for start in range(3)]
    for thread in producers:
        thread.start()
    received = set()
    with Connection("filesystem://localhost/", transport=Transport, transport_options=options) as connection:
        queue = connection.SimpleQueue("work")
        while len(received) < MESSAGES:
            message = queue.get(timeout=10)  # a half-written message would not decode here
            received.add(message.payload["n"])
            message.ack()
        queue.close()
    for thread in producers:
        thread.join()
    assert received == set(range(MESSAGES))
    assert not list(tmp_path.glob("*.part"))
