"""TaskServices: what the tasks of one job share within a TaskManager, besides the network.

A module of its own so that operators and tasks use the services without importing the
TaskManager that provides them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from shuffle import kernel
from taskmgr.metrics.latency import LatencyHistogram, PeriodEntry
from taskmgr.metrics.sampler import MetricSampler, MetricSource
from taskmgr.results import Verification


class IterationChannel:
    """The feedback queue between an iteration tail and head of one slot (Flink's broker)."""

    def __init__(self) -> None:
        self.queue: kernel.Queue[tuple[Any, int]] = kernel.Queue()

    def feed(self, record: tuple[Any, int]) -> None:
        try:
            self.queue.put_nowait(record)
        except kernel.ClosedResourceError:
            pass  # the head has ended: feedback is dropped

    def pending(self) -> bool:
        return len(self.queue) > 0


@dataclass
class TaskServices:
    """What the tasks of one job share within a TaskManager, besides the network."""

    task_manager: str
    sampler: MetricSampler
    collected: defaultdict[str, list[Any]] = field(default_factory=lambda: defaultdict(list))
    verifications: defaultdict[str, Verification] = field(default_factory=lambda: defaultdict(Verification))
    #: Sink vertex name -> its subtasks' latency over the steady state (merged).
    latency: defaultdict[str, LatencyHistogram] = field(default_factory=lambda: defaultdict(LatencyHistogram))
    #: Sink vertex name -> its subtasks' latency per sample period, for a run that ends early.
    latency_periods: defaultdict[str, list[PeriodEntry]] = field(default_factory=lambda: defaultdict(list))
    emitted_per_origin: defaultdict[int, int] = field(default_factory=lambda: defaultdict(int))
    iteration_channels: dict[tuple[str, int], IterationChannel] = field(default_factory=dict)
    #: Sends the tasks' checkpoint acknowledgements and declines to the JobManager.
    checkpoint_responder: Any = None

    def register_metrics(self, vertex: str, subtask: int, source: MetricSource) -> None:
        self.sampler.register(vertex, subtask, self.task_manager, source)

    def iteration_channel(self, broker_id: str, subtask: int) -> IterationChannel:
        return self.iteration_channels.setdefault((broker_id, subtask), IterationChannel())
