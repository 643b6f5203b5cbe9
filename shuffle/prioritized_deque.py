"""PrioritizedDeque (Flink's `NET/.../PrioritizedDeque`): a FIFO with a priority section.

Priority elements sit in a front section, FIFO among themselves, ahead of all others;
`poll` takes from the front. Subpartitions (priority events overtaking buffers), remote
channels (received priority buffers) and input gates (channels or gates with priority
events first) all queue this way. Elements are compared by identity where it matters
(`prioritize`, `remove`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class PrioritizedDeque(Generic[T]):
    __slots__ = ("_deque", "_num_priority")

    def __init__(self) -> None:
        self._deque: deque[T] = deque()
        self._num_priority = 0

    def add(self, element: T, priority: bool = False) -> None:
        """Append `element`, at the end of the priority section if `priority`."""
        if priority:
            self.add_priority_element(element)
        else:
            self._deque.append(element)

    def add_priority_element(self, element: T) -> None:
        self._deque.insert(self._num_priority, element)
        self._num_priority += 1

    def prioritize(self, element: T) -> bool:
        """Move a queued `element` to the end of the priority section; False if it is
        there already."""
        position = self._index(element)
        if position < self._num_priority:
            return False
        del self._deque[position]
        self.add_priority_element(element)
        return True

    def poll(self) -> T:
        """Take the first element (`IndexError` if empty)."""
        element = self._deque.popleft()
        if self._num_priority:
            self._num_priority -= 1
        return element

    def remove(self, element: T) -> None:
        position = self._index(element)
        del self._deque[position]
        if position < self._num_priority:
            self._num_priority -= 1

    def clear(self) -> None:
        self._deque.clear()
        self._num_priority = 0

    def _index(self, element: T) -> int:
        for position, queued in enumerate(self._deque):
            if queued is element or queued == element:
                return position
        raise ValueError(f"{element!r} is not queued")

    @property
    def num_priority_elements(self) -> int:
        return self._num_priority

    def __getitem__(self, index: int) -> T:
        return self._deque[index]

    def __len__(self) -> int:
        return len(self._deque)

    def __bool__(self) -> bool:
        return bool(self._deque)

    def __iter__(self) -> Iterator[T]:
        return iter(self._deque)
