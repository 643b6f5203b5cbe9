"""Key groups as in Flink (`RT/state/KeyGroupRangeAssignment.java`, `CORE/util/MathUtils.java`).

A key lands in key group `murmur_hash(hashCode(key)) % max_parallelism`, and key group g
belongs to operator `g * parallelism // max_parallelism`. `hashCode` is Java's, for the
Java type PyFlink would give the key:

- `int` -> `Long` (PyFlink maps Python int to LONG/BIGINT): `(int)(v ^ (v >>> 32))`;
  values outside the Long range are rejected;
- `bool` -> `Boolean`: 1231 / 1237;
- `str` -> `String`: `s[0]*31^(n-1) + ...` over UTF-16 code units;
- `float` -> `Double`: the Long hash of `doubleToLongBits` (NaN canonicalized);
- `tuple` -> Flink `TupleN`: `h = 31*h + hashCode(field)`, `None` fields hash to 0;
- `bytes` / `bytearray` -> `Arrays.hashCode(byte[])`: `h = 31*h + signed byte`, from 1.

All arithmetic is 32-bit two's complement. Numpy versions work on int64 keys (Longs).
"""

from __future__ import annotations

import math
import struct

import numpy as np

DEFAULT_LOWER_BOUND_MAX_PARALLELISM = 1 << 7
UPPER_BOUND_MAX_PARALLELISM = 1 << 15

_MASK32 = 0xFFFFFFFF
_MASK64 = 0xFFFFFFFFFFFFFFFF
_INT_MIN = -(1 << 31)
_LONG_MIN = -(1 << 63)
_LONG_MAX = (1 << 63) - 1
_CANONICAL_NAN_BITS = 0x7FF8000000000000

_C1, _C2, _C3, _C4, _C5 = 0xCC9E2D51, 0x1B873593, 0xE6546B64, 0x85EBCA6B, 0xC2B2AE35
_U32 = np.uint32


def _to_int32(u: int) -> int:
    """Reinterpret the low 32 bits of `u` as a signed Java int."""
    u &= _MASK32
    return u - (1 << 32) if u & 0x80000000 else u


def murmur_hash(code: int) -> int:
    """`MathUtils.murmurHash(int)`: a non-negative int from a Java int hash code."""
    h = (code * _C1) & _MASK32
    h = ((h << 15) | (h >> 17)) & _MASK32
    h = (h * _C2) & _MASK32
    h = ((h << 13) | (h >> 19)) & _MASK32
    h = (h * 5 + _C3) & _MASK32
    h ^= 4
    h ^= h >> 16
    h = (h * _C4) & _MASK32
    h ^= h >> 13
    h = (h * _C5) & _MASK32
    h ^= h >> 16
    signed = _to_int32(h)
    if signed >= 0:
        return signed
    return -signed if signed != _INT_MIN else 0


def _long_hash(v: int) -> int:
    u = v & _MASK64
    return _to_int32(u ^ (u >> 32))


def java_hash_code(key: object) -> int:
    """Java's `hashCode()` of the Java value `key` stands for (see the module doc)."""
    if key is None:
        raise ValueError("Assigned key must not be null!")
    if isinstance(key, (bool, np.bool_)):
        return 1231 if key else 1237
    if isinstance(key, (int, np.integer)):
        v = int(key)
        if not _LONG_MIN <= v <= _LONG_MAX:
            raise ValueError(f"int key {v} is outside Java's Long range")
        return _long_hash(v)
    if isinstance(key, (float, np.floating)):
        value = float(key)
        bits = _CANONICAL_NAN_BITS if math.isnan(value) else struct.unpack(">q", struct.pack(">d", value))[0]
        return _long_hash(bits)
    if isinstance(key, str):
        units = key.encode("utf-16-be", "surrogatepass")
        h = 0
        for (unit,) in struct.iter_unpack(">H", units):
            h = (31 * h + unit) & _MASK32
        return _to_int32(h)
    if isinstance(key, tuple):
        h = 0
        for field in key:
            h = (31 * h + (0 if field is None else java_hash_code(field))) & _MASK32
        return _to_int32(h)
    if isinstance(key, (bytes, bytearray)):
        h = 1
        for b in key:
            h = (31 * h + (b - 256 if b > 127 else b)) & _MASK32
        return _to_int32(h)
    raise TypeError(f"no Java hashCode rule for keys of type {type(key).__name__}")


def _check_parallelism(parallelism: int) -> None:
    if not 0 < parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        raise ValueError(f"Operator parallelism not within bounds: {parallelism}")


def _check_max_parallelism(max_parallelism: int, parallelism: int) -> None:
    _check_parallelism(parallelism)
    _check_parallelism(max_parallelism)
    if max_parallelism < parallelism:
        raise ValueError("Maximum parallelism must not be smaller than parallelism.")


def _round_up_to_power_of_two(x: int) -> int:
    x -= 1
    for shift in (1, 2, 4, 8, 16):
        x |= x >> shift
    return x + 1


def compute_default_max_parallelism(parallelism: int) -> int:
    """`min(max(roundUpToPowerOfTwo(p + p/2), 128), 32768)`, used when none is configured."""
    _check_parallelism(parallelism)
    candidate = _round_up_to_power_of_two(parallelism + parallelism // 2)
    return min(max(candidate, DEFAULT_LOWER_BOUND_MAX_PARALLELISM), UPPER_BOUND_MAX_PARALLELISM)


def assign_to_key_group(key: object, max_parallelism: int) -> int:
    """The key group of `key`."""
    return murmur_hash(java_hash_code(key)) % max_parallelism


def compute_operator_index_for_key_group(max_parallelism: int, parallelism: int, key_group: int) -> int:
    """The operator (subtask) index that owns `key_group`."""
    return key_group * parallelism // max_parallelism


def assign_key_to_parallel_operator(key: object, max_parallelism: int, parallelism: int) -> int:
    """The operator index `key` is sent to."""
    _check_max_parallelism(max_parallelism, parallelism)
    key_group = assign_to_key_group(key, max_parallelism)
    return compute_operator_index_for_key_group(max_parallelism, parallelism, key_group)


def compute_key_group_range_for_operator_index(
    max_parallelism: int, parallelism: int, operator_index: int
) -> range:
    """The key groups of operator `operator_index`: `[ceil(i*maxP/p), floor(((i+1)*maxP-1)/p)]`."""
    _check_max_parallelism(max_parallelism, parallelism)
    start = (operator_index * max_parallelism + parallelism - 1) // parallelism
    end = ((operator_index + 1) * max_parallelism - 1) // parallelism
    return range(start, end + 1)


def murmur_hash_array(codes: np.ndarray) -> np.ndarray:
    """`murmur_hash` of every Java int in `codes`, as an int32 array (all >= 0)."""
    h = np.asarray(codes).astype(_U32)
    h *= _U32(_C1)
    h = (h << _U32(15)) | (h >> _U32(17))
    h *= _U32(_C2)
    h = (h << _U32(13)) | (h >> _U32(19))
    h *= _U32(5)
    h += _U32(_C3)
    h ^= _U32(4)
    h ^= h >> _U32(16)
    h *= _U32(_C4)
    h ^= h >> _U32(13)
    h *= _U32(_C5)
    h ^= h >> _U32(16)
    signed = h.view(np.int32)
    return np.where(signed == np.int32(_INT_MIN), np.int32(0), np.abs(signed))


def long_hash_codes(keys: np.ndarray) -> np.ndarray:
    """Java `Long.hashCode` of every int64 key, as an int32 array."""
    u = np.asarray(keys, dtype=np.int64).view(np.uint64)
    return (u ^ (u >> np.uint64(32))).astype(_U32).view(np.int32)


def assign_keys_to_operators(keys: np.ndarray, max_parallelism: int, parallelism: int) -> np.ndarray:
    """Operator index of every int64 key (as Java Longs), as an int64 array."""
    _check_max_parallelism(max_parallelism, parallelism)
    key_groups = murmur_hash_array(long_hash_codes(keys)).astype(np.int64) % max_parallelism
    return key_groups * parallelism // max_parallelism


#: Largest key range `KeyToOperatorTable` tabulates (keys of synthetic workloads are small ints).
MAX_TABULATED_KEYS = 1 << 20


class KeyToOperatorTable:
    """`assign_keys_to_operators` for one (max_parallelism, parallelism), memoized for the
    int64 keys in [0, MAX_TABULATED_KEYS): one `np.take` per batch instead of ~20 numpy
    passes of the hash, which dominate small batches. Other keys are hashed as usual."""

    __slots__ = ("max_parallelism", "parallelism", "_table", "_table_list")

    def __init__(self, max_parallelism: int, parallelism: int) -> None:
        _check_max_parallelism(max_parallelism, parallelism)
        self.max_parallelism = max_parallelism
        self.parallelism = parallelism
        self._table = np.empty(0, dtype=np.int64)
        self._table_list: list[int] = []

    def lookup(self, keys: np.ndarray) -> np.ndarray:
        """Operator index of every int64 key, as an int64 array (as `assign_keys_to_operators`)."""
        if not len(keys):
            return np.empty(0, dtype=np.int64)
        top = int(keys.view(np.uint64).max())  # negative keys are huge here
        if top >= len(self._table):
            if top >= MAX_TABULATED_KEYS:
                return assign_keys_to_operators(keys, self.max_parallelism, self.parallelism)
            self._tabulate(top)
        return self._table.take(keys)

    def lookup_list(self, keys: list[int]) -> list[int]:
        """`lookup` of a few keys given as a list, without numpy."""
        if not keys:
            return []
        low, top = min(keys), max(keys)
        if low < 0 or top >= MAX_TABULATED_KEYS:
            return assign_keys_to_operators(np.asarray(keys, dtype=np.int64), self.max_parallelism,
                                            self.parallelism).tolist()
        if top >= len(self._table_list):
            self._tabulate(top)
        table = self._table_list
        return [table[key] for key in keys]

    def _tabulate(self, top: int) -> None:
        """Tabulate the keys [0, 2^k) with 2^k > `top`."""
        size = 1 << top.bit_length()
        self._table = assign_keys_to_operators(np.arange(size, dtype=np.int64), self.max_parallelism,
                                               self.parallelism)
        self._table_list = self._table.tolist()
