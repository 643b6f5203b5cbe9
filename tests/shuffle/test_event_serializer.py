"""DataType, events and their byte encoding (spec 2.7)."""

import math
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shuffle.api.events import (
    AlignmentType,
    CancelCheckpointMarker,
    CheckpointBarrier,
    CheckpointOptions,
    EndOfChannelStateEvent,
    EndOfData,
    EndOfPartitionEvent,
    EndOfSuperstepEvent,
    EventAnnouncement,
    StopMode,
)
from shuffle.buffer.buffer_builder import BufferConsumer
from shuffle.buffer.data_type import DataType
from shuffle.serialization.event_serializer import (
    data_type_for_event,
    deserialize_event,
    event_buffer_bytes,
    serialize_event,
)

# (ordinal, is_buffer, is_event, has_priority, is_blocking_upstream, requires_announcement)
DATA_TYPES = {
    DataType.NONE: (0, False, False, False, False, False),
    DataType.DATA_BUFFER: (1, True, False, False, False, False),
    DataType.EVENT_BUFFER: (2, False, True, False, False, False),
    DataType.PRIORITIZED_EVENT_BUFFER: (3, False, True, True, False, False),
    DataType.ALIGNED_CHECKPOINT_BARRIER: (4, False, True, False, True, False),
    DataType.TIMEOUTABLE_ALIGNED_CHECKPOINT_BARRIER: (5, False, True, False, True, True),
    DataType.RECOVERY_COMPLETION: (6, False, True, False, True, False),
    DataType.END_OF_SEGMENT: (7, False, True, False, False, False),
}


@pytest.mark.parametrize("data_type", list(DataType))
def test_data_type_ordinals_and_properties(data_type):
    expected = DATA_TYPES[data_type]
    actual = (
        int(data_type),
        data_type.is_buffer,
        data_type.is_event,
        data_type.has_priority,
        data_type.is_blocking_upstream,
        data_type.requires_announcement,
    )
    assert actual == expected
    assert len(DataType) == len(DATA_TYPES)


ALIGNED = CheckpointOptions("CHECKPOINT", AlignmentType.ALIGNED)
TIMEOUTABLE = CheckpointOptions("CHECKPOINT", AlignmentType.ALIGNED, 0.5)
UNALIGNED = CheckpointOptions("CHECKPOINT", AlignmentType.UNALIGNED)
AT_LEAST_ONCE = CheckpointOptions("CHECKPOINT", AlignmentType.AT_LEAST_ONCE)
FORCED = CheckpointOptions("CHECKPOINT", AlignmentType.FORCED_ALIGNED, 0.5)
SAVEPOINT = CheckpointOptions("SAVEPOINT", AlignmentType.ALIGNED)


def test_checkpoint_options_predicates():
    assert ALIGNED.needs_alignment and not ALIGNED.is_timeoutable and not ALIGNED.is_unaligned
    assert TIMEOUTABLE.needs_alignment and TIMEOUTABLE.is_timeoutable
    assert UNALIGNED.is_unaligned and not UNALIGNED.needs_alignment
    assert not AT_LEAST_ONCE.needs_alignment and not AT_LEAST_ONCE.is_exactly_once_mode
    assert FORCED.needs_alignment and not FORCED.is_timeoutable
    assert SAVEPOINT.needs_alignment
    assert CheckpointOptions("CHECKPOINT", AlignmentType.ALIGNED, 0.0).is_timeoutable is False


def test_checkpoint_options_validation_and_to_unaligned():
    with pytest.raises(ValueError, match="Savepoint can't be unaligned"):
        CheckpointOptions("SAVEPOINT", AlignmentType.UNALIGNED)
    with pytest.raises(ValueError, match="Unaligned checkpoint can't have timeout"):
        CheckpointOptions("CHECKPOINT", AlignmentType.UNALIGNED, 1.0)
    with pytest.raises(ValueError, match="Unknown checkpoint type"):
        CheckpointOptions("SNAPSHOT")
    assert TIMEOUTABLE.to_unaligned() == UNALIGNED
    with pytest.raises(ValueError):
        AT_LEAST_ONCE.to_unaligned()
    with pytest.raises(ValueError, match="^Savepoints can not be unaligned$"):  # CheckpointOptions.unaligned
        CheckpointBarrier(3, 1000, SAVEPOINT).as_unaligned()
    barrier = CheckpointBarrier(3, 1000, TIMEOUTABLE)
    assert barrier.as_unaligned() == CheckpointBarrier(3, 1000, UNALIGNED)
    unaligned = CheckpointBarrier(3, 1000, UNALIGNED)
    assert unaligned.as_unaligned() is unaligned


@pytest.mark.parametrize("options", [ALIGNED, SAVEPOINT, AT_LEAST_ONCE, TIMEOUTABLE, UNALIGNED])
def test_forced_alignment_is_reversible(options):
    """Flink's CheckpointOptionsTest: only unaligned and timeoutable options are forced to
    align (keeping the timeout, no longer timeoutable); forcing then reverting gives them back."""
    forced = options.with_unaligned_unsupported()
    assert options.with_unaligned_supported() == options
    if options in (TIMEOUTABLE, UNALIGNED):
        assert forced.alignment is AlignmentType.FORCED_ALIGNED and forced.needs_alignment
        assert not forced.is_timeoutable and not forced.is_unaligned
        assert forced.aligned_checkpoint_timeout == options.aligned_checkpoint_timeout
    else:
        assert forced == options
    assert forced.with_unaligned_supported() == options
    barrier = CheckpointBarrier(3, 1000, options)
    assert barrier.with_options(forced) == CheckpointBarrier(3, 1000, forced)


def test_for_config_follows_flink():
    def opts(kind, eo, ua, timeout):
        return CheckpointOptions.for_config(
            kind, is_exactly_once_mode=eo, is_unaligned_enabled=ua, aligned_checkpoint_timeout=timeout
        )

    assert opts("CHECKPOINT", False, True, 0).alignment is AlignmentType.AT_LEAST_ONCE
    assert opts("SAVEPOINT", True, True, 0).alignment is AlignmentType.ALIGNED
    assert opts("CHECKPOINT", True, False, 0) == ALIGNED
    assert opts("CHECKPOINT", True, True, 0) == UNALIGNED
    assert opts("CHECKPOINT", True, True, 0.5) == TIMEOUTABLE


@pytest.mark.parametrize(
    ("event", "priority", "expected"),
    [
        (EndOfPartitionEvent.INSTANCE, True, DataType.PRIORITIZED_EVENT_BUFFER),
        (EndOfPartitionEvent.INSTANCE, False, DataType.EVENT_BUFFER),
        (EndOfChannelStateEvent.INSTANCE, False, DataType.RECOVERY_COMPLETION),
        (EndOfData(StopMode.DRAIN), False, DataType.EVENT_BUFFER),
        (CancelCheckpointMarker(1), False, DataType.EVENT_BUFFER),
        (CheckpointBarrier(1, 0, ALIGNED), False, DataType.ALIGNED_CHECKPOINT_BARRIER),
        (CheckpointBarrier(1, 0, FORCED), False, DataType.ALIGNED_CHECKPOINT_BARRIER),
        (CheckpointBarrier(1, 0, SAVEPOINT), False, DataType.ALIGNED_CHECKPOINT_BARRIER),
        (CheckpointBarrier(1, 0, TIMEOUTABLE), False, DataType.TIMEOUTABLE_ALIGNED_CHECKPOINT_BARRIER),
        (CheckpointBarrier(1, 0, UNALIGNED), False, DataType.EVENT_BUFFER),
        (CheckpointBarrier(1, 0, UNALIGNED), True, DataType.PRIORITIZED_EVENT_BUFFER),
        (CheckpointBarrier(1, 0, AT_LEAST_ONCE), False, DataType.EVENT_BUFFER),
    ],
)
def test_data_type_for_event(event, priority, expected):
    assert data_type_for_event(event, priority) is expected


@pytest.mark.parametrize(
    ("event", "tag"),
    [
        (EndOfPartitionEvent.INSTANCE, 0),
        (CheckpointBarrier(1, 2, ALIGNED), 1),
        (EndOfSuperstepEvent.INSTANCE, 2),
        (CancelCheckpointMarker(9), 4),
        (EndOfChannelStateEvent.INSTANCE, 5),
        (EventAnnouncement(CheckpointBarrier(1, 2, TIMEOUTABLE), 7), 6),
        (EndOfData(StopMode.NO_DRAIN), 8),
    ],
)
def test_tags_and_round_trip(event, tag):
    data = serialize_event(event)
    assert struct.unpack(">i", data[:4]) == (tag,)
    assert deserialize_event(data) == event


def test_exact_layouts():
    assert serialize_event(EndOfPartitionEvent()) == b"\x00\x00\x00\x00"
    assert serialize_event(CancelCheckpointMarker(258)) == bytes.fromhex("00000004" "0000000000000102")
    assert serialize_event(EndOfData(StopMode.NO_DRAIN)) == bytes.fromhex("00000008" "01")
    barrier = serialize_event(CheckpointBarrier(5, 1700, TIMEOUTABLE))
    assert barrier == struct.pack(">iqqbibq", 1, 5, 1700, 0, -1, 1, 500)
    no_timeout = serialize_event(CheckpointBarrier(5, 1700, UNALIGNED))
    assert no_timeout[-9:] == struct.pack(">bq", 2, (1 << 63) - 1)
    savepoint = serialize_event(CheckpointBarrier(5, 1700, SAVEPOINT))
    assert savepoint[20:22] == b"\x01\x00" and len(savepoint) == len(barrier) + 1


def test_singletons_come_back_as_instances():
    assert deserialize_event(serialize_event(EndOfPartitionEvent())) is EndOfPartitionEvent.INSTANCE
    assert EndOfPartitionEvent() == EndOfPartitionEvent.INSTANCE


def test_corrupt_input_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown event tag 42"):
        deserialize_event(struct.pack(">i", 42))
    with pytest.raises(ValueError, match="Incomplete event"):
        deserialize_event(b"\x00\x00")
    with pytest.raises(ValueError, match="Incomplete event"):
        deserialize_event(serialize_event(CheckpointBarrier(1, 2, ALIGNED))[:-3])
    with pytest.raises(TypeError):
        serialize_event(object())


options_strategy = st.one_of(
    st.builds(
        CheckpointOptions,
        st.sampled_from(["CHECKPOINT", "SAVEPOINT"]),
        st.sampled_from([AlignmentType.AT_LEAST_ONCE, AlignmentType.ALIGNED, AlignmentType.FORCED_ALIGNED]),
        st.one_of(st.just(math.inf), st.integers(0, 10**9).map(lambda ms: ms / 1000)),
    ),
    st.just(UNALIGNED),
)
longs = st.integers(-(2**63), 2**63 - 1)
barriers = st.builds(CheckpointBarrier, longs, longs, options_strategy)
events = st.one_of(
    barriers,
    st.builds(CancelCheckpointMarker, longs),
    st.builds(EndOfData, st.sampled_from(StopMode)),
    st.sampled_from([EndOfPartitionEvent(), EndOfSuperstepEvent(), EndOfChannelStateEvent()]),
    st.builds(EventAnnouncement, barriers, st.integers(-(2**31), 2**31 - 1)),
)


@given(events)
def test_any_event_round_trips(event):
    assert deserialize_event(memoryview(serialize_event(event))) == event


# Flink's EventSerializerTest events (its TestTaskEvent, a user task event, is not modelled);
# the announced barrier is CheckpointOptions.create(CHECKPOINT, default, true, true, 10): aligned, 10 ms
FLINK_TEST_EVENTS = [
    EndOfPartitionEvent.INSTANCE,
    EndOfSuperstepEvent.INSTANCE,
    CheckpointBarrier(1678, 4623784, ALIGNED),
    CancelCheckpointMarker(287087987329842),
    EventAnnouncement(CheckpointBarrier(42, 1337, CheckpointOptions("CHECKPOINT", AlignmentType.ALIGNED, 0.010)), 44),
]


@pytest.mark.parametrize("event", FLINK_TEST_EVENTS)
def test_flink_test_events_round_trip(event):
    # testSerializeDeserializeEvent
    data = serialize_event(event)
    assert data and deserialize_event(data) == event
    assert deserialize_event(event_buffer_bytes(event)) == event  # the zeros after it are ignored


@pytest.mark.parametrize("event", FLINK_TEST_EVENTS)
def test_flink_test_events_as_queued_buffers(event):
    # testToBufferConsumer, testToBuffer: a finished event buffer with data; a barrier's blocks
    # upstream, every other event is a plain event buffer
    consumer = BufferConsumer.for_event(event_buffer_bytes(event), data_type_for_event(event, False))
    assert not consumer.is_buffer and consumer.is_finished and consumer.is_data_available()
    buffer = consumer.build()
    assert not buffer.is_recycled and buffer.size > 0
    if isinstance(event, CheckpointBarrier):
        assert buffer.data_type.is_blocking_upstream
    else:
        assert buffer.data_type is DataType.EVENT_BUFFER


@pytest.mark.parametrize(
    ("event", "written", "queued"),
    [
        (EndOfPartitionEvent.INSTANCE, 4, 4),
        (EndOfSuperstepEvent.INSTANCE, 4, 4),
        (EndOfChannelStateEvent.INSTANCE, 4, 4),
        (EndOfData(StopMode.DRAIN), 5, 5),
        (CancelCheckpointMarker(7), 12, 12),
        (CheckpointBarrier(1, 2, ALIGNED), 34, 38),
        (CheckpointBarrier(1, 2, UNALIGNED), 34, 38),
        (CheckpointBarrier(1, 2, TIMEOUTABLE), 34, 38),
        (CheckpointBarrier(1, 2, SAVEPOINT), 35, 38),
        (EventAnnouncement(CheckpointBarrier(1, 2, TIMEOUTABLE), 3), 42, 46),
    ],
)
def test_event_sizes_are_flink_2_3s(event, written, queued):
    # Flink 2.3 EventSerializer (bytecode): toSerializedEvent writes `written` bytes into an
    # array of `queued` (a barrier's: allocate(38 + location bytes)); toBuffer keeps the bytes
    # written, toBufferConsumer (a subpartition's, so the wire's) the whole array
    assert len(serialize_event(event)) == written
    payload = event_buffer_bytes(event)
    assert len(payload) == queued and payload[:written] == serialize_event(event)
    assert payload[written:] == bytes(queued - written)
