"""Sink operators, the verifying sink, and the iteration tail.

What a sink does depends on the sink object of the program: `DiscardingSink` counts,
`CollectSink(name)` gathers values for the job result, `PrintSink` prints, a
`VerifyingSink(name)` checks generator records (per channel and source subtask the
sequence numbers increase; at the end of the job, no record lost or duplicated), any
other `SinkFunction` or callable is invoked per value.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from graph import CollectSink, DiscardingSink, PrintSink, SinkFunction, StreamNode
from shuffle import kernel
from shuffle.serialization.records import FixedWidthRecords
from taskmgr.metrics.latency import LatencyMetrics
from taskmgr.operators.base import OperatorContext, Output, StreamOperator, user_method
from taskmgr.operators.records import Records, as_generic
from taskmgr.results import ORIGIN_SHIFT


class VerifyingSink(SinkFunction):
    """Checks the generator's sequence numbers: order per channel, no loss, no duplicates."""

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"VerifyingSink name must be a non-empty string, got {name!r}")
        self.name = name

    def invoke(self, value: Any) -> None:
        raise RuntimeError("VerifyingSink records are checked by the runtime")

    def __repr__(self) -> str:
        return f"VerifyingSink({self.name!r})"


class SinkOperator(StreamOperator):
    def __init__(self, node: StreamNode, ctx: OperatorContext, output: Output) -> None:
        super().__init__(node, ctx, output)
        sink = node.sink
        self.sink = sink
        self.invoke = None
        #: What the sink got since the last checkpoint, and the chunks each checkpoint so far
        #: took of it: a verifying sink's sequence numbers (arrays), a collect sink's values
        #: (lists; its results are operator state, as in Flink's collect sink).
        self._since_checkpoint: list[Any] = []
        self._checkpointed: list[Any] = []
        if isinstance(sink, CollectSink):
            self.collected = ctx.services.collected[sink.name]
        elif isinstance(sink, VerifyingSink):
            self.verification = ctx.services.verifications[sink.name]
            self.last_seq: dict[tuple[Any, int], int] = {}
        elif not isinstance(sink, DiscardingSink):
            self.invoke = print if isinstance(sink, PrintSink) else user_method(sink, "invoke")
        #: Records this sink received, since the beginning of the job (a restore included).
        self.received = 0
        self.latency = LatencyMetrics(ctx.services.latency[ctx.vertex_name],
                                      ctx.services.latency_periods[ctx.vertex_name], ctx.run.job_time)
        ctx.services.register_metrics(ctx.vertex_name, ctx.subtask_index, self.latency)

    async def process(self, records: Records, input_index: int) -> None:
        count = len(records)
        if self.node.cost is not None:  # most sinks have none: no call per batch then
            await self.ctx.charge(self.node.cost, count)
        self.ctx.records_received += count
        self.received += count
        if count:
            self._record_latency(records, count)
        sink = self.sink
        if isinstance(sink, DiscardingSink):
            return
        if isinstance(sink, CollectSink):
            values = [value for value, _ in as_generic(records)]
            self.collected.extend(values)
            self._since_checkpoint.extend(values)
        elif isinstance(sink, VerifyingSink):
            self._verify(records)
        else:
            for value, _ in as_generic(records):
                self.invoke(value)

    def _record_latency(self, records: Records, count: int) -> None:
        """End-to-end latency of each of the `count` records: when this sink was done with it
        minus its creation time (both ns of job time). Flink takes one record at a time
        through the chain: the records of the task's step were done one after the other,
        evenly over the time the step has taken until now (exact for one record out per
        record in, where the sink comes last in the chain)."""
        ctx, run = self.ctx, self.ctx.run
        now = kernel.current_time()
        job_time = now - run.t0  # run.job_time(), from the one reading of the clock
        if isinstance(records, FixedWidthRecords):
            created = records.rows["ts"]
        else:
            created = np.fromiter((timestamp for _, timestamp in records), dtype=np.int64, count=count)
        spacing_ns = int((now - ctx.step_start) * 1e9) // count
        self.latency.record_since(int(job_time * 1e9), created, spacing_ns, run.in_steady_state(job_time))

    def _verify(self, records: Records) -> None:
        if isinstance(records, FixedWidthRecords):
            seqs = records.seqs
        else:
            seqs = np.fromiter((value[1] for value, _ in records), dtype=np.int64, count=len(records))
        origins = seqs >> ORIGIN_SHIFT
        channel = self.ctx.current_channel
        first = int(origins[0])
        # A channel mostly carries one source subtask's records: skip the grouping then.
        groups = [first] if (origins == first).all() else np.unique(origins).tolist()
        for origin in groups:
            own = seqs if len(groups) == 1 else seqs[origins == origin]
            last = self.last_seq.get((channel, origin), -1)
            self.verification.out_of_order += int(own[0] <= last) + int(np.count_nonzero(np.diff(own) <= 0))
            self.last_seq[channel, origin] = int(own[-1])
            self.verification.seqs[origin].append(own)
        self._since_checkpoint.append(seqs)

    def snapshot_state(self) -> dict[str, Any]:
        """How many records came before the barrier; a verifying sink's also which, a collect
        sink's also its values."""
        state: dict[str, Any] = {self.state_key: self.received}
        sink = self.sink
        if not isinstance(sink, (VerifyingSink, CollectSink)):
            return state
        if self._since_checkpoint:
            verifying = isinstance(sink, VerifyingSink)
            self._checkpointed.append(np.concatenate(self._since_checkpoint) if verifying else self._since_checkpoint)
            self._since_checkpoint = []
        if isinstance(sink, CollectSink):
            return state | {f"{self.state_key}/collected": list(self._checkpointed)}
        return state | {"sink_seqs": {sink.name: list(self._checkpointed)}}

    def restore_state(self, state: dict[str, Any]) -> None:
        """The sink counts (and a verifying or collect sink keeps) what came before the barrier."""
        self.received = state.get(self.state_key, 0)
        self.ctx.records_received += self.received
        if isinstance(self.sink, CollectSink):
            self._checkpointed = list(state.get(f"{self.state_key}/collected", []))
            for values in self._checkpointed:
                self.collected.extend(values)
        if not isinstance(self.sink, VerifyingSink):
            return
        self._checkpointed = list(state.get("sink_seqs", {}).get(self.sink.name, []))
        for seqs in self._checkpointed:
            origins = seqs >> ORIGIN_SHIFT
            for origin in np.unique(origins).tolist():
                self.verification.seqs[origin].append(seqs[origins == origin])


class IterationTailOperator(StreamOperator):
    """Feeds records back to the iteration head of the same slot (dropped once it ended)."""

    def __init__(self, node: StreamNode, ctx: OperatorContext, output: Output) -> None:
        super().__init__(node, ctx, output)
        broker = node.sink
        self.channel = ctx.services.iteration_channel(broker.broker_id, ctx.subtask_index)

    async def process(self, records: Records, input_index: int) -> None:
        await self.ctx.charge(self.node.cost, len(records))
        for record in as_generic(records):
            self.channel.feed(record)
