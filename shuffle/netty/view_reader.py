"""CreditBasedSequenceNumberingViewReader: the server's reader of one subpartition (spec 3.4).

Counts the credit the consumer announced; a data buffer costs one credit, events none.
Without credit-based flow control (pre-1.5 mode) credit is unlimited.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shuffle.buffer.buffer import Buffer
from shuffle.buffer.data_type import DataType
from shuffle.errors import CreditViolationError, InvariantViolation
from shuffle.partition.result_partition_id import channel_name
from shuffle.partition.result_partition_manager import ResultPartitionManager
from shuffle.partition.subpartition_view import PipelinedSubpartitionView

if TYPE_CHECKING:
    from shuffle.netty.partition_request_queue import PartitionRequestQueue


#: What a reader hands the queue per buffer: (buffer, backlog, sequence number, more
#: available). A plain tuple, unpacked at once by its one caller (no NamedTuple to build).
ReaderBuffer = tuple[Buffer, int, int, bool]


class CreditBasedSequenceNumberingViewReader:
    __slots__ = ("receiver_id", "initial_credit", "num_credits_available", "queue", "credit_based",
                 "subpartition_index", "view", "is_registered_as_available")

    def __init__(self, receiver_id: int, initial_credit: int, queue: PartitionRequestQueue,
                 credit_based: bool = True, subpartition_index: int = 0) -> None:
        self.receiver_id = receiver_id
        self.initial_credit = initial_credit
        self.num_credits_available = initial_credit
        self.queue = queue
        self.credit_based = credit_based
        self.subpartition_index = subpartition_index
        self.view: PipelinedSubpartitionView | None = None
        self.is_registered_as_available = False

    @property
    def channel_name(self) -> str:
        """The channel's name in trace events (made when asked, not kept: see InputChannel.name),
        once the view is there (the partition's id is its subpartition's)."""
        return channel_name(self.view.subpartition.parent_name, self.subpartition_index)

    def request_subpartition_view(self, manager: ResultPartitionManager, partition_id: str) -> None:
        """Read `partition_id`'s subpartition (as Flink, the reader keeps the view, not the id)."""
        self.view = manager.create_subpartition_view(partition_id, self.subpartition_index, self)

    def add_credit(self, delta: int) -> None:
        self.num_credits_available += delta

    def resume_consumption(self) -> None:
        if self.initial_credit == 0:
            # The consumer gave up its floating buffers while blocked; it announces anew.
            self.num_credits_available = 0
        self.view.resume_consumption()

    def need_announce_backlog(self) -> bool:
        return self.credit_based and self.initial_credit == 0 and self.num_credits_available == 0

    # "Has credit" (`num_credits_available > 0 or not credit_based`) is written out in the two
    # methods that ask it, once per buffer each, rather than called.

    def get_availability_and_backlog(self) -> tuple[bool, int]:
        return self.view.get_availability_and_backlog(self.num_credits_available > 0 or not self.credit_based)

    def get_next_buffer(self) -> ReaderBuffer | None:
        nxt = self.view.get_next_buffer()
        if nxt is None:
            return None
        if nxt.buffer.data_type.is_buffer and self.credit_based:
            self.num_credits_available -= 1
            if self.num_credits_available < 0:
                nxt.buffer.recycle()
                raise CreditViolationError("no credit available")
        next_type = nxt.next_data_type
        more = next_type is not DataType.NONE and (
            self.num_credits_available > 0 or not self.credit_based or next_type.is_event)
        return nxt.buffer, nxt.buffers_in_backlog, nxt.sequence_number, more

    def check_invariants(self) -> None:
        """Credit is never negative (the channel's name is made only for the error)."""
        if self.num_credits_available < 0:
            raise InvariantViolation(f"{self.channel_name}: credit {self.num_credits_available}")

    # BufferAvailabilityListener
    def notify_data_available(self) -> None:
        self.queue.enqueue_available_reader(self)

    def notify_priority_event(self, sequence_number: int) -> None:
        self.queue.enqueue_available_reader(self)

    @property
    def is_released(self) -> bool:
        return self.view is not None and self.view.is_released

    @property
    def failure_cause(self) -> BaseException | None:
        """Why the view's partition was released, if its producer failed."""
        return self.view.failure_cause if self.view is not None else None

    def release_all_resources(self) -> None:
        if self.view is not None:
            self.view.release_all_resources()
