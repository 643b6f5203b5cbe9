"""Record wire format, serializer and the spanning deserializer (spec 2.1, appendix C)."""

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shuffle.serialization.record_serializer import RecordSerializer
from shuffle.serialization.records import (
    BLANK_BYTES,
    RECORD_OVERHEAD,
    FixedWidthFormat,
    FixedWidthRecords,
    GenericFormat,
    SyntheticRecord,
)
from shuffle.serialization.spanning_deserializer import SpanningRecordDeserializer

LONGS = st.integers(-(2**63), 2**63 - 1)


def feed(deserializer, stream: bytes, cuts):
    """Feed `stream` cut at `cuts`, scribbling over every buffer once it was added."""
    bounds = [0, *sorted(cuts), len(stream)]
    for start, end in zip(bounds, bounds[1:]):
        buffer = bytearray(stream[start:end])
        deserializer.add_buffer(memoryview(buffer))
        buffer[:] = b"\xee" * len(buffer)  # the buffer is recycled right away


def test_generic_record_layout():
    data = RecordSerializer(GenericFormat()).serialize("ab", 7)
    value = b"\xa2ab"  # msgpack fixstr
    assert data == struct.pack(">iBq", 9 + len(value), 0, 7) + value
    assert len(data) == len(value) + RECORD_OVERHEAD == len(value) + 13


def test_fixed_width_layout_matches_flink_sizes():
    # Flink 2.3: a Tuple2 of two Longs costs 29 B on the wire
    assert FixedWidthFormat(16).wire_size == 29
    data = RecordSerializer(FixedWidthFormat(24)).serialize((5, 6), 1000)
    assert data == struct.pack(">iBqqq", 33, 0, 1000, 5, 6) + bytes(8)
    batch = FixedWidthRecords.make([5], [6], [1000], 24)
    assert bytes(batch.to_wire()) == data
    assert batch.wire_size == 37
    with pytest.raises(ValueError, match="record_size must be >= 8"):
        FixedWidthFormat(7)


def test_a_long_record_is_21_bytes_and_its_own_key():
    # Flink 2.3 (appendix C): a Long from fromSequence is 21 B, ~1,560 to a 32 KiB buffer
    assert FixedWidthFormat(8).wire_size == 21
    assert 32 * 1024 // FixedWidthFormat(8).wire_size == 1560
    data = RecordSerializer(FixedWidthFormat(8)).serialize((99, 6), 1000)
    assert data == struct.pack(">iBqq", 17, 0, 1000, 6)
    batch = FixedWidthRecords.make([99, 98], [6, 7], 1000, 8)
    assert batch.keys.tolist() == batch.seqs.tolist() == [6, 7]
    assert bytes(batch.to_wire()[:21]) == data
    assert FixedWidthFormat(12).wire_size == 25 and FixedWidthRecords.make([1], [2], 0, 12).keys.tolist() == [2]


def test_generic_tuples_stay_tuples_and_lists_stay_lists():
    fmt = GenericFormat()
    value = {"t": (1, (2, [3, (4,)])), "l": [1, 2], 3: ()}
    decoded = fmt.decode_value(fmt.encode_value(value))
    assert decoded == value
    assert type(decoded["t"]) is tuple and type(decoded["t"][1][1]) is list
    assert type(decoded["l"]) is list and decoded[3] == ()
    with pytest.raises(TypeError):
        fmt.encode_value(object())


def test_synthetic_records_stay_synthetic_records_at_the_cost_of_a_tuple():
    fmt = GenericFormat()
    record = SyntheticRecord(7, 42, 1500)
    decoded = fmt.decode_value(fmt.encode_value((record, 3)))
    assert decoded == (record, 3) and type(decoded[0]) is SyntheticRecord and decoded[0].key == 7
    # the same bytes on the wire as the plain tuple it used to be
    assert len(fmt.encode_value(record)) == len(fmt.encode_value((7, 42, 1500)))


def test_batch_operations():
    batch = FixedWidthRecords.make(np.arange(6), np.arange(6) * 10, 3, 16)
    assert batch.keys.tolist() == list(range(6))
    assert batch.timestamps.tolist() == [3] * 6
    assert batch.take(batch.keys % 2 == 0).seqs.tolist() == [0, 20, 40]
    assert batch.take([5, 1]).keys.tolist() == [5, 1]
    both = FixedWidthRecords.concat([batch.take([0]), batch.take([4, 5])])
    assert both.keys.tolist() == [0, 4, 5] and both.rows.dtype == batch.rows.dtype
    with pytest.raises(ValueError, match="different record sizes"):
        FixedWidthRecords.concat([batch, FixedWidthRecords.make([1], [1], 0, 17)])
    with pytest.raises(ValueError):
        RecordSerializer(FixedWidthFormat(17)).serialize_batch(batch)


def test_corrupt_fixed_width_rows_are_rejected():
    batch = FixedWidthRecords.make([1, 2], [1, 2], 0, 16)
    wire = bytearray(batch.to_wire())
    wire[29 + 4] = 2  # tag of the second record: a watermark, not a record
    deserializer = SpanningRecordDeserializer(FixedWidthFormat(16))
    with pytest.raises(ValueError, match="row 1"):
        deserializer.add_buffer(wire)
    with pytest.raises(ValueError, match="corrupt"):
        SpanningRecordDeserializer(FixedWidthFormat(24)).add_buffer(bytes(batch.to_wire())[:37])


def test_generic_rejects_other_stream_elements():
    deserializer = SpanningRecordDeserializer(GenericFormat())
    with pytest.raises(ValueError, match="tag 2"):
        deserializer.add_buffer(struct.pack(">iBq", 9, 2, 0))


def test_unfinished_data_is_tracked():
    deserializer = SpanningRecordDeserializer(GenericFormat())
    record = RecordSerializer(GenericFormat()).serialize(list(range(100)), 1)
    deserializer.add_buffer(record[:2])
    assert deserializer.has_unfinished_data and deserializer.read() == []
    deserializer.add_buffer(record[2:])
    assert not deserializer.has_unfinished_data
    assert deserializer.read() == [(list(range(100)), 1)]
    assert deserializer.read() == []


generic_values = st.recursive(
    st.none() | st.booleans() | LONGS | st.floats(allow_nan=False) | st.text() | st.binary(),
    lambda children: st.lists(children, max_size=4)
    | st.lists(children, max_size=4).map(tuple)
    | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=150)
@given(st.lists(st.tuples(generic_values, LONGS), max_size=30), st.data())
def test_generic_round_trip_under_any_split(records, data):
    serializer = RecordSerializer(GenericFormat())
    stream = b"".join(serializer.serialize(value, ts) for value, ts in records)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=20))
    deserializer = SpanningRecordDeserializer(GenericFormat())
    feed(deserializer, stream, cuts)
    assert deserializer.read() == records
    assert not deserializer.has_unfinished_data


@settings(max_examples=150)
@given(st.integers(8, 80), st.integers(0, 120), st.data())
def test_fixed_width_round_trip_under_any_split(record_size, n, data):
    seqs = data.draw(st.lists(LONGS, min_size=n, max_size=n))
    keys = data.draw(st.lists(LONGS, min_size=n, max_size=n)) if record_size >= 16 else seqs
    timestamps = data.draw(st.lists(LONGS, min_size=n, max_size=n))
    batch = FixedWidthRecords.make(keys, seqs, timestamps, record_size)
    stream = bytes(RecordSerializer(FixedWidthFormat(record_size)).serialize_batch(batch))
    assert len(stream) == n * (record_size + 13)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=20))
    deserializer = SpanningRecordDeserializer(FixedWidthFormat(record_size))
    feed(deserializer, stream, cuts)
    result = deserializer.read()
    assert result == batch
    assert (result.keys.tolist(), result.seqs.tolist(), result.timestamps.tolist()) == (keys, seqs, timestamps)
    assert not deserializer.has_unfinished_data


@given(st.integers(8, 64), st.integers(1, 50), st.integers(1, 300))
def test_fixed_width_buffers_of_one_size(record_size, n, buffer_size):
    """Records in fixed-size buffers, read after every buffer, as a channel does."""
    batch = FixedWidthRecords.make(np.arange(n), np.arange(n) + 7, 0, record_size)
    stream = bytes(batch.to_wire())
    deserializer = SpanningRecordDeserializer(FixedWidthFormat(record_size))
    parts = []
    for start in range(0, len(stream), buffer_size):
        deserializer.add_buffer(stream[start : start + buffer_size])
        parts.append(deserializer.read())
    assert FixedWidthRecords.concat(parts) == batch


@pytest.mark.parametrize("rows, bad_row", [(3, 0), (3, 2), (40, 0), (40, 33)])
def test_a_corrupt_length_field_is_found_in_few_and_in_many_rows(rows, bad_row):
    batch = FixedWidthRecords.make(range(rows), range(rows), 0, 16)
    wire = bytearray(batch.to_wire())
    wire[29 * bad_row + 3] += 1  # the length field's low byte
    with pytest.raises(ValueError, match=f"row {bad_row}: length 26"):
        SpanningRecordDeserializer(FixedWidthFormat(16)).add_buffer(wire)
    assert SpanningRecordDeserializer(FixedWidthFormat(16)).add_buffer(batch.to_wire()) is None


@pytest.mark.parametrize("record_size", [8, 12, 16, 32, 1000, BLANK_BYTES])
def test_batches_made_from_the_blank_template_are_the_serializers_records(record_size):
    """FixedWidthRecords.make copies small batches' blank rows from a template and builds large
    ones: both hold, record for record, what the serializer writes for one record."""
    serializer = RecordSerializer(FixedWidthFormat(record_size))
    template_rows = BLANK_BYTES // serializer.format.wire_size
    for n in sorted({0, 1, 2, 7, max(0, template_rows - 1), template_rows, template_rows + 1}):
        rng = np.random.default_rng(n)
        keys, seqs = rng.integers(-(2**63), 2**63 - 1, n), rng.integers(0, 2**62, n)
        timestamps = rng.integers(0, 2**50, n)
        batch = FixedWidthRecords.make(keys, seqs, timestamps, record_size)
        assert bytes(batch.to_wire()) == b"".join(
            serializer.serialize((key, seq), ts) for key, seq, ts in zip(keys.tolist(), seqs.tolist(), timestamps.tolist()))


# -- Flink's SpanningRecordSerializationTest ----------------------------------------------------
# Records appended to buffer builders of one segment size, each builder starting at a random
# offset of its segment (the buffer handed on is a slice); the deserializer takes every buffer
# once full, the last one as it is.


def _builder_at_random_offset(rng, segment_size: int):
    """Flink's setNextBufferForSerializer: a builder of `segment_size` writable bytes behind
    a random offset, and its consumer from that offset."""
    from shuffle.buffer.buffer import MemorySegment
    from shuffle.buffer.buffer_builder import BufferBuilder

    offset = rng.randrange(segment_size // 2) if segment_size > 2 else 0
    builder = BufferBuilder(MemorySegment.wrap(bytearray(segment_size + offset)), lambda segment: None)
    builder.append(bytes(offset))
    return builder, builder.create_buffer_consumer()


def _round_trip(records: list, segment_size: int) -> None:
    """Flink's testSerializationRoundTrip."""
    import random

    rng = random.Random(42)
    serializer = RecordSerializer(GenericFormat())
    deserializer = SpanningRecordDeserializer(GenericFormat())
    received = []
    builder, consumer = _builder_at_random_offset(rng, segment_size)
    for value in records:
        wire = serializer.serialize(value, 0)
        written = builder.append(wire)
        while builder.is_full():  # full: to the deserializer, the rest of the record into the next
            buffer = consumer.build()
            deserializer.add_buffer(buffer.memory())
            buffer.recycle()
            received += deserializer.read()
            builder, consumer = _builder_at_random_offset(rng, segment_size)
            written += builder.append(wire, written)
        assert written == len(wire)
    buffer = consumer.build()
    deserializer.add_buffer(buffer.memory())
    received += deserializer.read()
    assert [value for value, _ in received] == records
    assert not deserializer.has_unfinished_data


@pytest.mark.parametrize("segment_size, count", [(1, 10), (64, 64), (31, 248)],
                         ids=["testIntRecordsSpanningMultipleSegments", "testIntRecordsWithAlignedBuffers",
                              "testIntRecordsWithUnalignedBuffers"])
def test_int_records_round_trip_through_buffers(segment_size, count):
    import random

    rng = random.Random(count)
    _round_trip([rng.randrange(-(2**31), 2**31) for _ in range(count)], segment_size)


def test_random_records_round_trip_through_buffers():
    # Flink: SpanningRecordSerializationTest.testRandomRecords (10,000 records of random types
    # through 127-byte buffers)
    import random

    rng = random.Random(7)
    kinds = [lambda: rng.randrange(-(2**63), 2**63), lambda: rng.random(), lambda: rng.random() < 0.5,
             lambda: "".join(chr(rng.randrange(32, 0x3000)) for _ in range(rng.randrange(60))),
             lambda: rng.randbytes(rng.randrange(100)), lambda: [rng.randrange(256) for _ in range(rng.randrange(9))],
             lambda: (rng.randrange(2**15), str(rng.random()))]
    _round_trip([rng.choice(kinds)() for _ in range(10_000)], 127)


def test_mixed_large_records_round_trip_through_buffers():
    # Flink: SpanningRecordSerializationTest.testHandleMixedLargeRecords (99 records, every
    # other one a large object, through 32 KiB buffers)
    import random

    rng = random.Random(99)
    _round_trip([42 if i % 2 == 0 else rng.randbytes(rng.randrange(1, 2_000_000)) for i in range(99)], 32 * 1024)


@pytest.mark.parametrize("value, segment_size", [(12345, 1024), (12345, 1), (bytes(range(256)) * 40, 1)],
                         ids=["testSmallRecordUnconsumedBuffer", "testSpanningRecordUnconsumedBuffer",
                              "testLargeSpanningRecordUnconsumedBuffer"])
@pytest.mark.parametrize("left_over", [b"", bytes([42, 43, 44])], ids=["", "WithLeftOverBytes"])
def test_unconsumed_bytes_are_the_unfinished_records_start(value, segment_size, left_over):
    # Flink: SpanningRecordSerializationTest.testUnconsumedBuffer cases (and
    # testLargeSpanningRecordUnconsumedBufferWithLeftOverBytes). Flink's deserializer hands out
    # records one by one, so its unconsumed buffer holds a whole record until it is read; ours
    # parses a buffer's whole records at once (the task persists those it has not processed,
    # input_processor.prepare_input_snapshot), so only an unfinished record's start remains.
    wire = RecordSerializer(GenericFormat()).serialize(value, 0)
    deserializer = SpanningRecordDeserializer(GenericFormat())
    for start in range(0, len(wire), segment_size):
        chunk = wire[start:start + segment_size]
        last = start + segment_size >= len(wire)
        deserializer.add_buffer(chunk + left_over if last else chunk)
        if last:
            assert deserializer.read() == [(value, 0)]
            assert deserializer.unconsumed_bytes() == left_over
            assert deserializer.has_unfinished_data is bool(left_over)
        else:
            assert deserializer.read() == [] and deserializer.unconsumed_bytes() == wire[:start + len(chunk)]
