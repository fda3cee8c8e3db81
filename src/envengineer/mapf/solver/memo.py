"""The memory of :func:`~envengineer.mapf.solver.solve`: its last answers without a time limit, so that the
supervised targets of a freshly generated round and solver guidance reuse the generator's solutions
instead of solving every board a second time."""

from __future__ import annotations

import threading
from collections import OrderedDict


class _Memo:
    """The last ``size`` answers of :func:`solve` without a time limit, least recently used out first."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.hits = 0
        self._data: OrderedDict[tuple, tuple] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple) -> tuple | None:
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
                self.hits += 1
            return value

    def put(self, key: tuple, value: tuple) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            if len(self._data) > self.size:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self.hits = 0

    def __len__(self) -> int:
        return len(self._data)


#: :func:`solve` remembers its last answers without a time limit (about 0.6 KB each on warm-start boards,
#: 40 MB when full): the supervised targets of a freshly generated round and solver guidance then reuse
#: the generator's solutions instead of solving every board a second time.
MEMO = _Memo(65_536)
