"""PartitionRequestQueue: what the server writes next."""

from shuffle.netty.messages import ErrorResponse
from shuffle.netty.partition_request_queue import PartitionRequestQueue
from shuffle.trace import NULL_TRACER

from blocked_connection import BlockedConnection


class _BrokenReader:
    """A reader whose subpartition fails when the server pulls its next buffer."""

    receiver_id = 7
    is_registered_as_available = False
    view = object()
    released = False

    def get_availability_and_backlog(self) -> tuple[bool, int]:
        return True, 1

    def get_next_buffer(self):
        raise OSError("the spilled file is gone")

    def release_all_resources(self) -> None:
        self.released = True


def test_a_reader_that_fails_gets_its_error_written_next_even_as_the_last_available_one():
    queue = PartitionRequestQueue(BlockedConnection(), NULL_TRACER)
    reader = _BrokenReader()
    queue.notify_reader_created(reader)
    assert queue._next_sealed() == ErrorResponse("OSError", "the spilled file is gone", 7)
    assert reader.released and 7 not in queue.all_readers
    assert queue._next_sealed() is None
