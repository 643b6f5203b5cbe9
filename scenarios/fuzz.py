"""`shufflesim fuzz`: a mutation loop against the decoders that read a peer's bytes.

Two decoders: Netty frames (`shuffle.netty.messages.FrameDecoder`, whose error is
`CorruptedStreamError`) and JobManager/TaskManager RPC frames (`taskmgr.rpc.RpcDecoder`,
`RpcError`). Seeds are valid frames of every message type, built from the catalogues.
An input is random bytes, or one to three seeds with one to four mutations (bit flips,
interesting bytes and lengths, insertions, deletions, duplications, deep msgpack nesting,
truncation, splices), fed in random chunks to a fresh decoder. It may yield messages or
raise its protocol's error; any other exception is a bug: the input is saved to
`OUT/<decoder>-<n>.bin` (with the chunk boundaries and traceback in `.txt`) and the run
exits non-zero. `shufflesim fuzz --replay FILE` decodes a saved input again.
"""

from __future__ import annotations

import random
import re
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from shuffle.buffer.data_type import DataType
from shuffle.netty.messages import MESSAGE_TYPES, BufferResponse, CorruptedStreamError, FrameDecoder, encode
from taskmgr.rpc import MESSAGES, RpcDecoder, RpcError, encode_message
from taskmgr.rpc import encode as encode_rpc

#: Limits small enough that mutated lengths reach them (the defaults are 1 MiB and 10 MiB).
NETTY_LIMIT = 64 * 1024
RPC_LIMIT = 64 * 1024
INTERESTING_BYTES = (0x00, 0x01, 0x7F, 0x80, 0xFF, 0xC0, 0xC1, 0xC3, 0xC6, 0xD6, 0xDB, 0xDD, 0xDF)
INTERESTING_INTS = (0, 1, 8, 9, 10, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF)


@dataclass(frozen=True)
class Target:
    """One decoder under test: how to build it, its protocol's error, valid seed frames,
    and how to encode what it decodes (every message must re-encode to itself)."""

    name: str
    decoder: Callable[[], Any]
    error: type[Exception]
    seeds: list[bytes]
    limit: int
    encode: Callable[[Any], bytes]


def _example_value(annotation: str, variant: int) -> Any:
    """A valid value of a Netty header field's annotation (variant picks among several)."""
    return {
        "str": ["p-1", "ds0#1@" + "5f" * 16, "ds3#2@0"][variant % 3],
        "int | None": [None, 3][variant % 2],
        "int": [1, 7, 2**31 - 1][variant % 3],
        "bool": bool(variant % 2),
        "bytes": b"\x00\x00\x00\x02",
        "DataType": list(DataType)[variant % len(DataType)],
    }[annotation]


def netty_seeds() -> list[bytes]:
    """Frames of every Netty message type, BufferResponses of every data type."""
    seeds = []
    for cls in MESSAGE_TYPES:
        for variant in range(len(DataType) if cls is BufferResponse else 3):
            kwargs = {f.name: _example_value(f.type, variant) for f in fields(cls) if f.name != "buffer"}
            if cls is BufferResponse:
                kwargs["buffer"] = bytes(range(256))[: variant * 37]
            seeds.append(b"".join(bytes(part) for part in encode(cls(**kwargs))))
    return seeds


def _descriptor_example() -> dict[str, Any]:
    """A real deployment descriptor, as deploy_task carries it."""
    from graph import DiscardingSink, StreamExecutionEnvironment
    from taskmgr.deployment import JobInformation, create_descriptor, execution_id, new_attempt_ids

    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_generator().set_parallelism(2).key_by(lambda r: r.key).map().set_parallelism(2).sink_to(DiscardingSink())
    graph = env.get_execution_graph()
    vertex = graph.all_execution_vertices[-1]
    addresses = {execution_id(v): "127.0.0.1:4242" for v in graph.all_execution_vertices}
    info = JobInformation("job-0", 7, 0.001, 30.0, 1.0)
    return create_descriptor(vertex, info, addresses, new_attempt_ids(graph)).to_message()


def rpc_seeds() -> list[bytes]:
    """Frames of every RPC message type, with and without their optional fields."""
    values = {str: "tm-0", int: 4, float: 0.5, dict: _descriptor_example(), bytes: b"\x80\x05N."}
    seeds = []
    for kind, message in MESSAGES.items():
        required = {name: values[t] for name, (t, needed) in message.FIELDS.items() if needed}
        optional = {name: values[t] for name, (t, needed) in message.FIELDS.items() if not needed}
        seeds.append(encode_message(kind, **required))
        if optional:
            seeds.append(encode_message(kind, **required, **optional))
    return seeds


def _encode_netty(msg: Any) -> bytes:
    return b"".join(bytes(part) for part in encode(msg))


def targets() -> list[Target]:
    return [
        Target("netty", lambda: FrameDecoder(NETTY_LIMIT), CorruptedStreamError, netty_seeds(), NETTY_LIMIT,
               _encode_netty),
        Target("rpc", lambda: RpcDecoder(RPC_LIMIT), RpcError, rpc_seeds(), RPC_LIMIT, encode_rpc),
    ]


def mutate(data: bytearray, rng: random.Random, target: Target) -> None:
    """Apply one random mutation to `data` in place."""
    position = rng.randrange(len(data) + 1)
    kind = rng.randrange(9)
    if kind == 0 and data:
        data[min(position, len(data) - 1)] ^= 1 << rng.randrange(8)
    elif kind == 1 and data:
        data[min(position, len(data) - 1)] = rng.choice(INTERESTING_BYTES)
    elif kind == 2:
        value = rng.choice((*INTERESTING_INTS, len(data), len(data) + 1, target.limit, target.limit + 1))
        data[position:position + 4] = value.to_bytes(4, "big")
    elif kind == 3:
        data[position:position] = rng.randbytes(rng.randint(1, 16))
    elif kind == 4:
        del data[position:position + rng.randint(1, 16)]
    elif kind == 5:
        data[position:position] = data[position:position + rng.randint(1, 32)]
    elif kind == 6:
        data[position:position] = bytes([rng.choice((0x91, 0x81))]) * rng.randint(1, 3000)
    elif kind == 7:
        del data[position:]
    else:
        other = rng.choice(target.seeds)
        data[position:] = other[rng.randrange(len(other)):]


def generate(rng: random.Random, target: Target) -> bytes:
    if rng.random() < 0.1:
        return rng.randbytes(rng.randint(0, 300))
    data = bytearray(b"".join(rng.choice(target.seeds) for _ in range(rng.randint(1, 3))))
    for _ in range(rng.randint(1, 4)):
        mutate(data, rng, target)
    return bytes(data)


def decode(target: Target, data: bytes, cuts: Iterable[int]) -> tuple[int, str]:
    """Feed `data` split at `cuts` to a fresh decoder: (messages decoded, outcome).

    Every message must re-encode to a frame that decodes and re-encodes to the same bytes.
    """
    decoder = target.decoder()
    decoded = 0
    try:
        for start, end in zip([0, *cuts], [*cuts, len(data)]):
            decoder.feed(data[start:end])
            for msg in decoder:
                msg = _copied(msg)
                frame = target.encode(msg)
                check = target.decoder()
                check.feed(frame)
                again = list(check)  # compared as bytes: a NaN is not equal to itself
                if len(again) != 1 or target.encode(_copied(again[0])) != frame:
                    raise AssertionError(f"{msg!r} does not survive a round trip")
                decoded += 1
    except target.error as exc:
        return decoded, f"{type(exc).__name__}: {_kind_of(str(exc))}"
    return decoded, "incomplete frame left" if decoder.buffered_bytes else "messages only"


def _copied(msg: Any) -> Any:
    """`msg` with a BufferResponse's payload copied out of the decoder's memory, as handlers do."""
    if type(msg) is BufferResponse:
        msg.buffer = bytes(msg.buffer)
    return msg


def _kind_of(message: str) -> str:
    """An error message without its numbers, quoted names and details, to count errors by kind."""
    message = re.sub(r"'[^']*'|\"[^\"]*\"", "'...'", message.split(" (", 1)[0])
    return re.sub(r"-?\d+", "N", message)[:90]


@dataclass
class TargetReport:
    inputs: int = 0
    messages: int = 0
    outcomes: Counter = field(default_factory=Counter)
    findings: list[Path] = field(default_factory=list)


def fuzz(inputs: int | None, seconds: float | None, seed: int, out: Path) -> dict[str, TargetReport]:
    """Run until `inputs` inputs in total or `seconds` have passed (whichever comes first)."""
    rng = random.Random(seed)
    chosen = targets()
    reports = {t.name: TargetReport() for t in chosen}
    deadline = time.monotonic() + seconds if seconds is not None else float("inf")
    n = 0
    while (inputs is None or n < inputs) and (n % 1000 or time.monotonic() < deadline):  # clock: every 1000
        target = chosen[n % len(chosen)]
        report = reports[target.name]
        data = generate(rng, target)
        cuts = sorted(rng.randrange(len(data) + 1) for _ in range(rng.randint(0, 3)))
        report.inputs += 1
        n += 1
        try:
            decoded, outcome = decode(target, data, cuts)
        except Exception:
            report.outcomes["other exception (a bug)"] += 1
            report.findings.append(_save(out, target.name, len(report.findings), data, cuts))
            continue
        report.messages += decoded
        report.outcomes[outcome] += 1
    return reports


def _save(out: Path, name: str, index: int, data: bytes, cuts: list[int]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}-{index}.bin"
    path.write_bytes(data)
    path.with_suffix(".txt").write_text(f"decoder: {name}\ncuts: {cuts}\n\n{traceback.format_exc()}")
    return path


class ReplayError(ValueError):
    """A saved input cannot be replayed: a file is missing or not what `fuzz` saved; the message names it."""


def replay(path: Path) -> tuple[int, str]:
    """Decode a saved input again, in its chunks; an exception that is not the protocol's propagates."""
    path = Path(path)
    info_path = path.with_suffix(".txt")
    try:
        data = path.read_bytes()
        info = info_path.read_text().splitlines()
    except OSError as e:
        raise ReplayError(f"{e.filename}: cannot read: {e.strerror} (give an input fuzz saved: NAME.bin, "
                          f"next to its NAME.txt)") from None
    by_name = {t.name: t for t in targets()}
    name = info[0].removeprefix("decoder: ") if info else ""
    if len(info) < 2 or name not in by_name or not info[1].startswith("cuts: "):
        raise ReplayError(f"{info_path}: not what fuzz saves (lines 'decoder: NAME', NAME one of "
                          f"{', '.join(by_name)}, then 'cuts: [...]')")
    cuts = [int(c) for c in re.findall(r"\d+", info[1])]
    return decode(by_name[name], data, cuts)


def format_report(reports: dict[str, TargetReport], wall: float) -> str:
    lines = []
    for name, report in reports.items():
        lines.append(f"{name}: {report.inputs:,} inputs, {report.messages:,} messages decoded")
        for outcome, count in report.outcomes.most_common():
            lines.append(f"  {count:>10,}  {outcome}")
        lines += [f"  input saved: {path}" for path in report.findings]
    total = sum(r.inputs for r in reports.values())
    lines.append(f"total: {total:,} inputs in {wall:.1f} s ({total / max(wall, 1e-9):,.0f}/s); "
                 f"other exceptions: {sum(len(r.findings) for r in reports.values())}")
    return "\n".join(lines)
