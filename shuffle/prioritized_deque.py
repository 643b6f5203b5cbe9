"""PrioritizedDeque (Flink's `NET/.../PrioritizedDeque`): a FIFO with a priority section.

Priority elements sit in a front section, FIFO among themselves, ahead of all others;
`poll` takes from the front. Subpartitions (priority events overtaking buffers), remote
channels (received priority buffers) and input gates (channels or gates with priority
events first) all queue this way. Elements are compared by identity where it matters
(`prioritize`, `remove`).

It is a `list` whose first `num_priority_elements` elements are the priority section:
length, truth, indexing and iteration are the list's own (no Python call on the hot path,
where a queue is asked whether it is empty several times per buffer). Change it only
through the methods below (`add`, not `append`), which keep the section's count. A list,
not a `collections.deque`: every channel and subpartition has one, mostly empty or a few
elements long, where taking the first element costs the same, and an empty deque costs
~700 bytes (a block of 64 slots) against a list's 56.

`NEVER_QUEUED` is the one queue of every owner that has not queued anything yet: most
channels and subpartitions of a large job stay idle, and each would hold an empty list.
Its owner replaces it with a queue of its own on the first add (`own`); adding to it
raises, so a site that forgets cannot share elements between owners.
"""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


class PrioritizedDeque(list):
    __slots__ = ("num_priority_elements",)

    def __init__(self) -> None:
        super().__init__()
        self.num_priority_elements = 0

    def add(self, element: T, priority: bool = False) -> None:
        """Append `element`, at the end of the priority section if `priority`."""
        if priority:
            self.add_priority_element(element)
        else:
            self.append(element)

    def add_priority_element(self, element: T) -> None:
        self.insert(self.num_priority_elements, element)
        self.num_priority_elements += 1

    def prioritize(self, element: T) -> bool:
        """Move a queued `element` to the end of the priority section; False if it is
        there already."""
        position = self._index(element)
        if position < self.num_priority_elements:
            return False
        del self[position]
        self.add_priority_element(element)
        return True

    def poll(self) -> T:
        """Take the first element (`IndexError` if empty)."""
        element = self.pop(0)
        if self.num_priority_elements:
            self.num_priority_elements -= 1
        return element

    def remove(self, element: T) -> None:
        position = self._index(element)
        del self[position]
        if position < self.num_priority_elements:
            self.num_priority_elements -= 1

    def clear(self) -> None:
        super().clear()
        self.num_priority_elements = 0

    def _index(self, element: T) -> int:
        for position, queued in enumerate(self):
            if queued is element or queued == element:
                return position
        raise ValueError(f"{element!r} is not queued")

    def __eq__(self, other: object) -> bool:
        return self is other

    __hash__ = object.__hash__


class _NeverQueued(PrioritizedDeque):
    """Empty, shared and read-only: see the module's docstring."""

    __slots__ = ()

    def add(self, element: T, priority: bool = False) -> None:
        raise TypeError("NEVER_QUEUED is shared: add to the owner's own queue (prioritized_deque.own)")

    add_priority_element = append = extend = insert = add


NEVER_QUEUED: PrioritizedDeque = _NeverQueued()


def own(queue: PrioritizedDeque) -> PrioritizedDeque:
    """`queue`, or a new empty queue in place of NEVER_QUEUED (assign it back to the owner)."""
    return PrioritizedDeque() if queue is NEVER_QUEUED else queue
