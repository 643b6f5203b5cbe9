"""Properties of the whole stack over random small setups (hypothesis).

Every record arrives once and in order per channel, every buffer returns to its pool, and
in credit mode no data buffer is ever sent without credit.
"""

from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shuffle import kernel
from shuffle.config import NetworkConfig
from shuffle.harness.credit_flow import CreditFlowHarness

setups = st.fixed_dictionaries({
    "channels": st.integers(1, 3),
    "local": st.booleans(),
    "separate_producers": st.booleans(),
    "buffer_size": st.sampled_from([64, 100, 256, 1024]),
    "exclusive": st.integers(0, 3),
    "floating": st.integers(1, 4),
    "flow_control": st.sampled_from(["credit", "credit", "tcp"]),
    "buffer_timeout": st.sampled_from([0.0, 0.001, -1.0]),
})
records = st.lists(st.tuples(st.integers(0, 10**6), st.text(max_size=300)), max_size=60)


def run_scenario(setup, per_channel, costs):
    cfg = NetworkConfig(buffer_size=setup["buffer_size"], exclusive_buffers_per_channel=setup["exclusive"],
                        floating_buffers_per_gate=setup["floating"], flow_control=setup["flow_control"],
                        send_window=4 * setup["buffer_size"])
    n = setup["channels"]

    async def main():
        async with CreditFlowHarness.open(cfg, channels=n, local=setup["local"],
                                          separate_producers=setup["separate_producers"]) as h:
            for channel in range(n):
                h.auto_consume(channel, costs[channel])
            with kernel.fail_after(600):
                for i in range(max(len(v) for v in per_channel)):
                    for channel in range(n):
                        if i < len(per_channel[channel]):
                            await h.emit_values(channel, [per_channel[channel][i]])
                            if setup["buffer_timeout"] == 0.0:
                                h.flush(channel)
                    if setup["buffer_timeout"] > 0:
                        h.flush()
                        await h.settle(setup["buffer_timeout"])
                h.finish()
                while not all(g.is_finished for g in h.gates):
                    await h.settle(0.01)
            errors = [c.error for g in h.gates for c in g.channels if c.error is not None]
            return [list(r) for r in h.received], list(h.trace.events), errors

    return kernel.run(main, mode="sim")


def credit_never_exceeded(events, exclusive):
    """Per channel, data buffers sent never exceed initial credit plus credit received so far."""
    budget = defaultdict(lambda: exclusive)
    for e in events:
        if e.get("local"):
            continue
        if e["event"] == "credit_received":
            budget[e["channel"]] += e["credit"]
        elif e["event"] == "buffer_sent" and e["data_type"] == "DATA_BUFFER":
            budget[e["channel"]] -= 1
            if budget[e["channel"]] < 0:
                return False
    return True


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setup=setups, data=st.data())
def test_every_record_arrives_once_in_order_and_nothing_leaks(setup, data):
    n = setup["channels"]
    per_channel = [data.draw(records, label=f"records of channel {c}") for c in range(n)]
    costs = [data.draw(st.sampled_from([0.0, 0.0001, 0.002]), label=f"cost {c}") for c in range(n)]
    received, events, errors = run_scenario(setup, per_channel, costs)  # leaks fail inside (close)
    assert errors == []
    assert received == [list(v) for v in per_channel]
    if setup["flow_control"] == "credit":
        assert credit_never_exceeded(events, setup["exclusive"])  # initial credit of a 1-channel gate
