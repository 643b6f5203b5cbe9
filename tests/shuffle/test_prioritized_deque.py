"""PrioritizedDeque: priority elements first, FIFO within each section."""

import pytest

from shuffle.prioritized_deque import PrioritizedDeque


def test_priority_elements_overtake_and_keep_their_own_order():
    queue = PrioritizedDeque()
    for element, priority in (("a", False), ("b", False), ("p1", True), ("c", False), ("p2", True)):
        queue.add(element, priority)
    assert list(queue) == ["p1", "p2", "a", "b", "c"] and queue.num_priority_elements == 2
    assert [queue.poll() for _ in range(3)] == ["p1", "p2", "a"]
    assert queue.num_priority_elements == 0


def test_prioritize_moves_a_queued_element_once_and_remove_keeps_the_count():
    queue = PrioritizedDeque()
    for element in "abc":
        queue.add(element)
    assert queue.prioritize("c") is True
    assert queue.prioritize("c") is False  # already in the priority section
    assert list(queue) == ["c", "a", "b"] and queue.num_priority_elements == 1
    queue.remove("c")
    assert list(queue) == ["a", "b"] and queue.num_priority_elements == 0
    with pytest.raises(ValueError):
        queue.remove("z")
    queue.clear()
    assert not queue and len(queue) == 0
