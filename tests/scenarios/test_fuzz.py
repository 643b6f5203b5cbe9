"""`shufflesim fuzz`: the mutation loop over both decoders, and what it does with a bug."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scenarios import fuzz as fuzz_module
from scenarios.cli import main
from scenarios.fuzz import Target, decode, fuzz, generate, netty_seeds, replay, rpc_seeds
from shuffle.netty.messages import MESSAGE_TYPES, FrameDecoder
from taskmgr.rpc import MESSAGES, RpcDecoder


def decode_all(decoder, frames):
    for frame in frames:
        decoder.feed(frame)
    decoded = list(decoder)
    assert len(decoded) == len(frames) and decoder.buffered_bytes == 0
    return decoded


def test_seeds_are_valid_frames_of_every_message_type():
    assert {type(m) for m in decode_all(FrameDecoder(), netty_seeds())} == set(MESSAGE_TYPES)
    assert {m.TYPE for m in decode_all(RpcDecoder(), rpc_seeds())} == set(MESSAGES)


TARGETS = fuzz_module.targets()
cut_lists = st.lists(st.integers(0, 2000), max_size=6)


def chunks(data, cuts):
    return sorted(c for c in cuts if c <= len(data))


# `decode` lets any exception but the protocol's through and checks that every message
# it yields re-encodes to itself.


@settings(max_examples=300)
@given(st.sampled_from(TARGETS), st.binary(max_size=400), cut_lists)
def test_random_bytes_in_random_chunks(target, data, cuts):
    decode(target, data, chunks(data, cuts))


@settings(max_examples=600)
@given(st.sampled_from(TARGETS), st.randoms(use_true_random=False), cut_lists)
def test_mutated_valid_frames_in_random_chunks(target, rng, cuts):
    data = generate(rng, target)
    decode(target, data, chunks(data, cuts))


def test_both_decoders_only_yield_messages_or_their_error(tmp_path):
    reports = fuzz(4000, None, 1, tmp_path)
    assert {name: r.inputs for name, r in reports.items()} == {"netty": 2000, "rpc": 2000}
    for name, error in (("netty", "CorruptedStreamError"), ("rpc", "RpcError")):
        report = reports[name]
        assert report.findings == [] and report.messages > 0
        assert sum(n for outcome, n in report.outcomes.items() if outcome.startswith(error)) > 1000
    assert not any(tmp_path.iterdir())


class BuggyDecoder(FrameDecoder):
    """A decoder with a planted bug: two 0xFF bytes in a row raise IndexError."""

    def feed(self, data):
        if b"\xff\xff" in bytes(data):
            raise IndexError("planted")
        super().feed(data)


def test_another_exception_is_saved_reported_and_replayable(tmp_path, monkeypatch, capsys):
    buggy = Target("netty", BuggyDecoder, ValueError, netty_seeds(), 1 << 16, fuzz_module._encode_netty)
    monkeypatch.setattr(fuzz_module, "targets", lambda: [buggy])
    assert main(["fuzz", "--inputs", "500", "--out", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "other exception (a bug)" in out and "input saved:" in out
    saved = sorted(tmp_path.glob("netty-*.bin"))
    assert saved and "IndexError: planted" in saved[0].with_suffix(".txt").read_text()
    with pytest.raises(IndexError, match="planted"):
        replay(saved[0])


def test_bad_arguments_exit_2(capsys):
    assert main(["fuzz", "--inputs", "0"]) == 2
    assert "must be positive" in capsys.readouterr().err
