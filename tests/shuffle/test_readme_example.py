"""The README's credit-flow example, verbatim: the documented usage must keep working."""

from shuffle.config import NetworkConfig


async def test_backlog_brings_floating_buffers(credit_flow):
    h = await credit_flow(config=NetworkConfig(buffer_size=4096), channels=1)
    assert h.sender(0).credit == 2                  # initial credit = exclusive buffers
    await h.emit_buffers(0, 8)                      # 7 visible, the 8th still being written
    await h.settle()                                # let the network run (virtual time)
    assert h.buffers_sent(0)[0]["backlog"] == 6     # backlog announced with the first buffer
    assert h.credits_announced(0) == [7]            # backlog + 2 required: 7 floating, one AddCredit
    h.consume(0, 2)                                 # the consumer task reads and recycles two buffers
    await h.settle()
    assert h.receiver(0).queued == 5
