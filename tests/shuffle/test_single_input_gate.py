"""SingleInputGate: end-of-data state (spec 4.6)."""

from shuffle.config import NetworkConfig


async def test_gate_end_of_data_is_drained_only_if_every_channel_drained(credit_flow):
    from shuffle.api.events import EndOfData, EndOfDataStatus, StopMode

    h = await credit_flow(config=NetworkConfig(buffer_size=4096), channels=2, separate_producers=True)
    gate_states = []
    for channel, mode in ((0, StopMode.DRAIN), (1, StopMode.NO_DRAIN)):
        h.targets[channel][0].broadcast_event(EndOfData(mode))
        h.flush(channel)
    await h.settle()
    for channel in range(2):
        assert h.gates[channel].has_received_end_of_data() is EndOfDataStatus.NOT_END_OF_DATA
        h.consume(channel, 1)
        gate_states.append(h.gates[channel].has_received_end_of_data())
    assert gate_states == [EndOfDataStatus.DRAINED, EndOfDataStatus.STOPPED]
