"""JobVertex ids as Flink computes them (``StreamGraphHasherV2``).

Each node's hash is Guava's murmur3_128(seed 0) over the node's position in a breadth-first
traversal from the sources (once more for each chainable output), mixed with the hashes of
its inputs; a ``uid`` replaces this by the hash of the uid string. The JobVertexID is the
hex of the head node's hash, so ids match what Flink shows for the same program.
"""

from __future__ import annotations

import struct
from collections import deque
from typing import Callable

from graph.errors import IllegalArgumentException
from graph.stream_graph import StreamEdge, StreamGraph, StreamNode

_MASK = (1 << 64) - 1
_C1 = 0x87C37B91114253D5
_C2 = 0x4CF5AD432745937F


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _MASK


def _fmix(k: int) -> int:
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & _MASK
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & _MASK
    return k ^ (k >> 33)


def murmur3_128(data: bytes, seed: int = 0) -> bytes:
    """MurmurHash3 x64 128-bit; bytes as Guava's ``HashCode.asBytes()`` (h1, h2 little-endian)."""
    h1 = h2 = seed
    full = len(data) - len(data) % 16
    for offset in range(0, full, 16):
        k1, k2 = struct.unpack_from("<QQ", data, offset)
        h1 ^= _rotl((k1 * _C1) & _MASK, 31) * _C2 & _MASK
        h1 = (_rotl(h1, 27) + h2) & _MASK
        h1 = (h1 * 5 + 0x52DCE729) & _MASK
        h2 ^= _rotl((k2 * _C2) & _MASK, 33) * _C1 & _MASK
        h2 = (_rotl(h2, 31) + h1) & _MASK
        h2 = (h2 * 5 + 0x38495AB5) & _MASK
    tail = data[full:] + bytes(16 - len(data) % 16)
    k1, k2 = struct.unpack("<QQ", tail)
    if len(data) % 16 > 8:
        h2 ^= _rotl((k2 * _C2) & _MASK, 33) * _C1 & _MASK
    if len(data) % 16:
        h1 ^= _rotl((k1 * _C1) & _MASK, 31) * _C2 & _MASK
    h1 ^= len(data)
    h2 ^= len(data)
    h1 = (h1 + h2) & _MASK
    h2 = (h2 + h1) & _MASK
    h1, h2 = _fmix(h1), _fmix(h2)
    h1 = (h1 + h2) & _MASK
    h2 = (h2 + h1) & _MASK
    return struct.pack("<QQ", h1, h2)


def traverse_stream_graph_and_generate_hashes(
    graph: StreamGraph, is_chainable: Callable[[StreamEdge, StreamGraph], bool]
) -> dict[int, bytes]:
    """Node id -> 16-byte hash, in Flink's breadth-first order from the sorted sources."""
    hashes: dict[int, bytes] = {}
    visited: set[int] = set(graph.source_ids)
    remaining = deque(graph.node(source_id) for source_id in sorted(graph.source_ids))
    while remaining:
        node = remaining.popleft()
        if _generate_node_hash(node, graph, hashes, is_chainable):
            for edge in node.out_edges:
                if edge.target_id not in visited:
                    remaining.append(edge.target)
                    visited.add(edge.target_id)
        else:
            visited.discard(node.id)  # revisited once all its inputs have hashes
    return hashes


def _generate_node_hash(node: StreamNode, graph: StreamGraph, hashes: dict[int, bytes],
                        is_chainable: Callable[[StreamEdge, StreamGraph], bool]) -> bool:
    if node.uid is not None:
        digest = murmur3_128(node.uid.encode("utf-8"))
        if digest in hashes.values():
            raise IllegalArgumentException(
                f'Hash collision on user-specified ID "{node.uid}". Most likely cause is a non-unique '
                "ID. Please check that all IDs specified via `uid(String)` are unique."
            )
        hashes[node.id] = digest
        return True
    if any(edge.source_id not in hashes for edge in node.in_edges):
        return False
    position = struct.pack("<i", len(hashes))
    chained = sum(1 for edge in node.out_edges if is_chainable(edge, graph))
    digest = bytearray(murmur3_128(position * (1 + chained)))
    for edge in node.in_edges:
        other = hashes[edge.source_id]
        for j in range(16):
            digest[j] = ((digest[j] * 37) ^ other[j]) & 0xFF
    hashes[node.id] = bytes(digest)
    return True
