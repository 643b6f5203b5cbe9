"""Events that travel in-band with records (Flink's `NET/api/*.java`, `RT/checkpoint/CheckpointOptions.java`).

Events are immutable values; `shuffle/serialization/event_serializer.py` turns them into
Flink's byte layout. Barrier timestamps are integer milliseconds as in Flink; the aligned
checkpoint timeout is in seconds (the project's unit), `math.inf` meaning "no timeout"
(Flink's `NO_ALIGNED_CHECKPOINT_TIME_OUT = Long.MAX_VALUE`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import IntEnum
from typing import ClassVar, Literal

CheckpointType = Literal["CHECKPOINT", "SAVEPOINT"]

NO_ALIGNED_CHECKPOINT_TIME_OUT = math.inf


class AlignmentType(IntEnum):
    """How a checkpoint is aligned; the ordinal is serialized as one byte."""

    AT_LEAST_ONCE = 0
    ALIGNED = 1
    UNALIGNED = 2
    FORCED_ALIGNED = 3


class EndOfDataStatus(IntEnum):
    """What an input gate has seen of EndOfData (Flink's `PullingAsyncDataInput.EndOfDataStatus`)."""

    NOT_END_OF_DATA = 0
    DRAINED = 1
    STOPPED = 2


class StopMode(IntEnum):
    """Why `EndOfData` was sent: drained (end of input, stop --drain) or not."""

    DRAIN = 0
    NO_DRAIN = 1


@dataclass(frozen=True)
class CheckpointOptions:
    """Options a barrier carries (type, alignment, aligned-checkpoint timeout in seconds)."""

    checkpoint_type: CheckpointType = "CHECKPOINT"
    alignment: AlignmentType = AlignmentType.ALIGNED
    aligned_checkpoint_timeout: float = NO_ALIGNED_CHECKPOINT_TIME_OUT

    def __post_init__(self) -> None:
        if self.checkpoint_type not in ("CHECKPOINT", "SAVEPOINT"):
            raise ValueError(f"Unknown checkpoint type: {self.checkpoint_type!r}")
        object.__setattr__(self, "alignment", AlignmentType(self.alignment))
        if self.aligned_checkpoint_timeout < 0:
            raise ValueError(
                f"aligned_checkpoint_timeout must be >= 0, got {self.aligned_checkpoint_timeout}"
            )
        if self.alignment is AlignmentType.UNALIGNED and self.is_savepoint:
            raise ValueError("Savepoint can't be unaligned")
        if (
            self.alignment is AlignmentType.UNALIGNED
            and self.aligned_checkpoint_timeout != NO_ALIGNED_CHECKPOINT_TIME_OUT
        ):
            raise ValueError(
                f"Unaligned checkpoint can't have timeout ({self.aligned_checkpoint_timeout})"
            )

    @classmethod
    def for_config(
        cls,
        checkpoint_type: CheckpointType,
        *,
        is_exactly_once_mode: bool,
        is_unaligned_enabled: bool,
        aligned_checkpoint_timeout: float,
    ) -> CheckpointOptions:
        """Options as the coordinator derives them from the job's checkpoint config."""
        if not is_exactly_once_mode:
            return cls(checkpoint_type, AlignmentType.AT_LEAST_ONCE)
        if checkpoint_type == "SAVEPOINT" or not is_unaligned_enabled:
            return cls(checkpoint_type, AlignmentType.ALIGNED)
        if aligned_checkpoint_timeout in (0, NO_ALIGNED_CHECKPOINT_TIME_OUT):
            return cls(checkpoint_type, AlignmentType.UNALIGNED)
        return cls(checkpoint_type, AlignmentType.ALIGNED, aligned_checkpoint_timeout)

    @property
    def is_savepoint(self) -> bool:
        return self.checkpoint_type == "SAVEPOINT"

    @property
    def is_exactly_once_mode(self) -> bool:
        return self.alignment is not AlignmentType.AT_LEAST_ONCE

    @property
    def is_unaligned(self) -> bool:
        return self.alignment is AlignmentType.UNALIGNED

    @property
    def is_timeoutable(self) -> bool:
        """An aligned barrier that turns unaligned after a finite, positive timeout."""
        return (
            self.alignment is AlignmentType.ALIGNED
            and 0 < self.aligned_checkpoint_timeout < NO_ALIGNED_CHECKPOINT_TIME_OUT
        )

    @property
    def needs_alignment(self) -> bool:
        """Exactly-once and not unaligned (savepoints always align)."""
        return self.is_exactly_once_mode and (self.is_savepoint or not self.is_unaligned)

    def with_unaligned_unsupported(self) -> CheckpointOptions:
        """Flink's `withUnalignedUnsupported`: the options of a barrier sent on an output
        whose edge cannot take unaligned checkpoints (pointwise, broadcast, custom): an
        unaligned or timeoutable checkpoint is forced to align there, keeping its timeout."""
        if self.is_unaligned or self.is_timeoutable:
            return CheckpointOptions(self.checkpoint_type, AlignmentType.FORCED_ALIGNED,
                                     self.aligned_checkpoint_timeout)
        return self

    def with_unaligned_supported(self) -> CheckpointOptions:
        """Flink's `withUnalignedSupported`: forced-aligned options back as they were
        (aligned with their timeout, or unaligned); any other options unchanged."""
        if self.alignment is not AlignmentType.FORCED_ALIGNED:
            return self
        if self.aligned_checkpoint_timeout != NO_ALIGNED_CHECKPOINT_TIME_OUT:
            return CheckpointOptions(self.checkpoint_type, AlignmentType.ALIGNED, self.aligned_checkpoint_timeout)
        return CheckpointOptions(self.checkpoint_type, AlignmentType.UNALIGNED)

    def to_unaligned(self) -> CheckpointOptions:
        """The unaligned form of aligned options (after an alignment timeout). A savepoint's
        are refused with the message of Flink's `CheckpointOptions.unaligned`."""
        if self.alignment is not AlignmentType.ALIGNED:
            raise ValueError(f"only ALIGNED options can become unaligned, not {self.alignment.name}")
        if self.is_savepoint:
            raise ValueError("Savepoints can not be unaligned")
        return CheckpointOptions(self.checkpoint_type, AlignmentType.UNALIGNED)


class AbstractEvent:
    """Base of all in-band events."""

    __slots__ = ()


@dataclass(frozen=True)
class EndOfPartitionEvent(AbstractEvent):
    """Last element of every subpartition; all instances are equal (use `INSTANCE`)."""

    INSTANCE: ClassVar[EndOfPartitionEvent]


@dataclass(frozen=True)
class EndOfSuperstepEvent(AbstractEvent):
    """End of one superstep of an iteration; all instances are equal (use `INSTANCE`)."""

    INSTANCE: ClassVar[EndOfSuperstepEvent]


@dataclass(frozen=True)
class EndOfChannelStateEvent(AbstractEvent):
    """End of recovered in-flight data; all instances are equal (use `INSTANCE`)."""

    INSTANCE: ClassVar[EndOfChannelStateEvent]


EndOfPartitionEvent.INSTANCE = EndOfPartitionEvent()
EndOfSuperstepEvent.INSTANCE = EndOfSuperstepEvent()
EndOfChannelStateEvent.INSTANCE = EndOfChannelStateEvent()


@dataclass(frozen=True)
class CheckpointBarrier(AbstractEvent):
    """Barrier of checkpoint `id`, started at `timestamp` (ms), with its options."""

    id: int
    timestamp: int
    options: CheckpointOptions

    def with_options(self, options: CheckpointOptions) -> CheckpointBarrier:
        """This barrier with other options (itself if they are the same)."""
        return self if options == self.options else replace(self, options=options)

    def as_unaligned(self) -> CheckpointBarrier:
        """This barrier with unaligned options (itself if already unaligned)."""
        if self.options.is_unaligned:
            return self
        return replace(self, options=self.options.to_unaligned())


@dataclass(frozen=True)
class CancelCheckpointMarker(AbstractEvent):
    """Tells downstream tasks not to wait for the barrier of `checkpoint_id`."""

    checkpoint_id: int


@dataclass(frozen=True)
class EndOfData(AbstractEvent):
    """No more user records follow on this channel."""

    stop_mode: StopMode = StopMode.DRAIN


@dataclass(frozen=True)
class EventAnnouncement(AbstractEvent):
    """Announces `announced_event` queued at `sequence_number` (always a priority element)."""

    announced_event: AbstractEvent
    sequence_number: int
