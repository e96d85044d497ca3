"""A bounded least-recently-used map shared by threads: per-process caches of the hot paths."""

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

V = TypeVar("V")


class LRUMap(Generic[V]):
    """At most ``maxsize`` entries by text key; the least recently used goes first.

    gunicorn's gthread workers serve several requests of one process at once; every read
    and write of the map holds the lock (a few dict operations).
    """

    def __init__(self, maxsize: int):
        self.maxsize = maxsize
        self._entries: OrderedDict[str, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> V | None:
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def put(self, key: str, value: V) -> None:
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)

    def discard(self, key: str) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._entries
