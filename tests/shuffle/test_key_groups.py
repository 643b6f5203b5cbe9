"""Key groups, murmur hash and Java hashCode (spec 8.2, 8.3)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from shuffle.partitioner.key_groups import (
    assign_key_to_parallel_operator,
    assign_keys_to_operators,
    assign_to_key_group,
    compute_default_max_parallelism,
    compute_key_group_range_for_operator_index,
    compute_operator_index_for_key_group,
    java_hash_code,
    long_hash_codes,
    murmur_hash,
    murmur_hash_array,
)

# spec 8.3: (int hashCode, murmurHash, keyGroup @ maxP 128)
VECTORS = [
    (0, 593689054, 94),
    (1, 68075478, 86),
    (2, 1085422463, 127),
    (3, 847579505, 113),
    (42, 1134849565, 29),
    (-1, 1982413648, 80),
    (2147483647, 1653689534, 62),
    (-2147483648, 1718298732, 108),
    (97520992, 1330823394, 98),
    (97, 1455541201, 81),
    (99162322, 1715862179, 35),
]


@pytest.mark.parametrize(("code", "murmur", "key_group"), VECTORS)
def test_murmur_vectors(code, murmur, key_group):
    assert murmur_hash(code) == murmur
    assert murmur % 128 == key_group
    assert murmur_hash_array(np.array([code], dtype=np.int32)).tolist() == [murmur]


@pytest.mark.parametrize(("key", "code"), [("flink", 97520992), ("a", 97), ("hello", 99162322)])
def test_string_keys(key, code):
    assert java_hash_code(key) == code
    assert assign_to_key_group(key, 128) == dict((c, g) for c, _, g in VECTORS)[code]


@pytest.mark.parametrize(
    ("key", "code"),
    [
        (7, 7),  # Long.hashCode(7L)
        (-1, 0),  # (int)(-1 ^ (-1 >>> 32)) == 0
        (2**40 + 7, 263),
        (-(2**63), -(2**31)),
        (True, 1231),
        (False, 1237),
        (1.5, 1073217536),  # Double.hashCode(1.5)
        (0.0, 0),
        (-0.0, -(2**31)),
        (float("nan"), 2146959360),
        ((1, 2), 33),  # Tuple2.of(1L, 2L).hashCode()
        (("a", None), 97 * 31),
        (b"ab", 4066),  # Arrays.hashCode(new byte[]{97, 98})
        (b"\xff", 30),  # 31 + (-1)
        ("\U0001f600", 1772899),  # surrogate pair: 0xD83D * 31 + 0xDE00
        ("", 0),
    ],
)
def test_java_hash_codes(key, code):
    assert java_hash_code(key) == code


def test_bad_keys():
    with pytest.raises(ValueError, match="Assigned key must not be null!"):
        assign_key_to_parallel_operator(None, 128, 4)
    with pytest.raises(ValueError, match="Long range"):
        java_hash_code(2**63)
    with pytest.raises(TypeError):
        java_hash_code(object())


def test_operator_index_and_ranges():
    assert [compute_operator_index_for_key_group(128, 4, g) for g in (0, 31, 32, 127)] == [0, 0, 1, 3]
    ranges = [compute_key_group_range_for_operator_index(128, 3, i) for i in range(3)]
    assert ranges == [range(0, 43), range(43, 86), range(86, 128)]
    for i, key_groups in enumerate(ranges):
        assert all(compute_operator_index_for_key_group(128, 3, g) == i for g in key_groups)
    with pytest.raises(ValueError, match="must not be smaller than parallelism"):
        compute_key_group_range_for_operator_index(2, 3, 0)


@pytest.mark.parametrize(
    ("p", "expected"),
    [(1, 128), (85, 128), (86, 256), (100, 256), (200, 512), (1000, 2048), (10000, 16384), (30000, 32768)],
)
def test_default_max_parallelism(p, expected):
    assert compute_default_max_parallelism(p) == expected


@pytest.mark.parametrize("p", [0, 32769])
def test_parallelism_bounds(p):
    with pytest.raises(ValueError, match="Operator parallelism not within bounds"):
        compute_default_max_parallelism(p)


int32_arrays = hnp.arrays(np.int32, st.integers(0, 200), elements=st.integers(-(2**31), 2**31 - 1))
int64_arrays = hnp.arrays(np.int64, st.integers(0, 200), elements=st.integers(-(2**63), 2**63 - 1))


@given(int32_arrays)
def test_vectorized_murmur_equals_scalar(codes):
    assert murmur_hash_array(codes).tolist() == [murmur_hash(int(c)) for c in codes]


@given(int64_arrays, st.integers(1, 300), st.data())
def test_vectorized_assignment_equals_scalar(keys, parallelism, data):
    max_parallelism = data.draw(st.integers(parallelism, 4096))
    assert long_hash_codes(keys).tolist() == [java_hash_code(int(k)) for k in keys]
    expected = [assign_key_to_parallel_operator(int(k), max_parallelism, parallelism) for k in keys]
    assert assign_keys_to_operators(keys, max_parallelism, parallelism).tolist() == expected


def test_the_key_table_gives_what_the_hash_gives():
    from shuffle.partitioner.key_groups import MAX_TABULATED_KEYS, KeyToOperatorTable

    table = KeyToOperatorTable(128, 7)
    rng = np.random.default_rng(1)
    for keys in (np.array([3, 5, 1023]), np.array([-1, 5]), np.array([MAX_TABULATED_KEYS, 2]),
                 rng.integers(0, 5000, 300), rng.integers(-(1 << 62), 1 << 62, 300), np.zeros(0, dtype=np.int64)):
        expected = assign_keys_to_operators(keys, 128, 7).tolist()
        assert table.lookup(keys).tolist() == expected
        assert KeyToOperatorTable(128, 7).lookup_list(keys.tolist()) == expected
        assert table.lookup_list(keys.tolist()) == expected
