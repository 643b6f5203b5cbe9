"""Flink's InputProcessorUtilTest: a task's barrier handler over gates given out of their
index order still reaches each channel through its own gate."""

from __future__ import annotations

from graph.api.environment import CheckpointConfig
from shuffle.api.events import CheckpointOptions
from taskmgr.checkpointing.barrier_handlers import create_checkpoint_barrier_handler

from barrier_fakes import Clock, FakeGate, FakeTask, barrier, ch


class IndexedGate(FakeGate):
    def __init__(self, log: list, gate_index: int) -> None:
        super().__init__(log)
        self.gate_index = gate_index

    def block_consumption(self, channel):
        assert channel.gate_index == self.gate_index, f"gate {self.gate_index} asked for {channel}"
        super().block_consumption(channel)

    def resume_consumption(self, channel):
        assert channel.gate_index == self.gate_index, f"gate {self.gate_index} asked for {channel}"
        super().resume_consumption(channel)


def test_gates_out_of_index_order():
    # testCreateCheckpointedMultipleInputGate: the first gate has the larger index
    log, clock = [], Clock()
    task = FakeTask(log)
    gates = [IndexedGate(log, 1), IndexedGate(log, 0)]
    sizes = {1: 4, 0: 2}
    handler = create_checkpoint_barrier_handler(CheckpointConfig(interval=1.0, unaligned=True), task, gates,
                                                6, clock, clock.register)
    savepoint = CheckpointOptions("SAVEPOINT")  # aligned: the handler blocks and resumes each channel
    for gate in gates:
        for channel in range(sizes[gate.gate_index]):
            handler.process_barrier(barrier(1, savepoint), ch(channel, gate.gate_index))
    assert ("inputs_finished", 1) in log and task.triggered() == [1]
    assert all(gate.blocked == set() for gate in gates)
