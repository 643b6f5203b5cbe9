"""What a task still running after its job's run waits for, in words: the JobManager asks
each TaskManager (`DescribeTasks`) when a job cannot drain, and fails the job with the
answers, so that a stall names the output pool or the input channels it is stuck on
rather than only the tasks."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from shuffle.consumer.input_channel import InputChannel
from shuffle.consumer.local_input_channel import LocalInputChannel
from shuffle.consumer.remote_input_channel import RemoteInputChannel
from shuffle.consumer.single_input_gate import SingleInputGate
from shuffle.netty.client_handler import CreditBasedPartitionRequestClientHandler
from shuffle.partition.result_partition import ResultPartition
from taskmgr.input_processor import StreamInputProcessor

if TYPE_CHECKING:
    from taskmgr.stream_task import StreamTask

#: Distinct channel states a description lists before it only counts the rest.
MAX_LISTED = 3
#: Channel indices listed per gate and state.
MAX_CHANNELS = 8


def describe_wait(stream_task: StreamTask) -> str:
    """What the task's mailbox loop waits for now."""
    io = stream_task.io
    if io.soft_backpressure.is_measuring or io.hard_backpressure.is_measuring:
        pools = [describe_output(writer.partition) for writer in stream_task.writers if not writer.is_available()]
        return "waits for an output buffer: " + ("; ".join(pools) or "its outputs are available again")
    if io.idle.is_measuring:
        task_input = stream_task.input
        if not isinstance(task_input, StreamInputProcessor):
            return "waits for its source's next records"
        return "waits for input: " + describe_inputs([gate for checkpointed in task_input.inputs
                                                      for gate in checkpointed.gates])
    if stream_task.end_of_data_received and stream_task.checkpoints_after_tasks_finish:
        return "ended its input; " + describe_final_wait(stream_task)
    return "busy (not waiting)"


def describe_final_wait(stream_task: StreamTask) -> str:
    """What a task that ended its input waits for before it finishes, with checkpoints after
    tasks finish (Flink's `afterInvoke`)."""
    unacknowledged = [writer.partition.partition_id for writer in stream_task.writers
                      if not writer.partition.all_data_processed.is_set()]
    if unacknowledged:
        return ("waits until its consumers have processed every record of partition "
                + ", ".join(unacknowledged) + " (they acknowledge EndOfData)")
    if not stream_task.final_checkpoint_completed.is_set():
        return "waits for a checkpoint to complete after its end (checkpoints after tasks finish)"
    return "waits for its pending checkpoints to complete"


def describe_output(partition: ResultPartition) -> str:
    """Why the partition's buffer pool gives no buffer: it is used up, or a subpartition
    holds as many as one may (max-buffers-per-channel)."""
    pool = partition.buffer_pool
    if pool is None:
        return f"partition {partition.partition_id} has no buffer pool"
    full = [i for i, count in enumerate(pool.subpartition_buffer_counts()) if count >= pool.max_buffers_per_channel]
    text = (f"partition {partition.partition_id}: {pool.best_effort_get_num_of_used_buffers()} of "
            f"{pool.num_buffers} buffers in use, {pool.num_available} free")
    if full:
        listed = ", ".join(map(str, full[:MAX_LISTED])) + (f" and {len(full) - MAX_LISTED} more" if len(full) > MAX_LISTED else "")
        text += f"; subpartition {listed} at max-buffers-per-channel ({pool.max_buffers_per_channel})"
    return text


def describe_inputs(gates: list[SingleInputGate]) -> str:
    """The unfinished channels of the gates, grouped by state (each state once, with its
    channels)."""
    channels: dict[str, list[tuple[int, int]]] = {}
    for gate in gates:
        unfinished = set(gate.unfinished_channels())
        for channel in gate.channels:
            if channel.channel_info in unfinished:
                channels.setdefault(describe_channel(channel), []).append((gate.gate_index, channel.channel_index))
    if not channels:
        return "every channel has ended"
    parts = [f"{_channel_list(where)}: {state}" for state, where in list(channels.items())[:MAX_LISTED]]
    if len(channels) > MAX_LISTED:
        parts.append(f"{sum(len(where) for where in list(channels.values())[MAX_LISTED:])} more channels in other states")
    return "; ".join(parts)


def _channel_list(where: list[tuple[int, int]]) -> str:
    """"channel 3 of gate 0", "channels 0, 2 of gate 0", at most `MAX_CHANNELS` listed per gate."""
    by_gate: dict[int, list[int]] = {}
    for gate, channel in where:
        by_gate.setdefault(gate, []).append(channel)
    listed = []
    for gate, indices in by_gate.items():
        shown = ", ".join(map(str, indices[:MAX_CHANNELS]))
        more = f" and {len(indices) - MAX_CHANNELS} more" if len(indices) > MAX_CHANNELS else ""
        listed.append(f"{'channels' if len(indices) > 1 else 'channel'} {shown}{more} of gate {gate}")
    return ", ".join(listed)


def describe_channel(channel: InputChannel) -> str:
    """A local channel's subpartition (what it holds, whether any of it is readable), a
    remote one's queue, credit and buffers (credit-based flow control: the producer sends
    only against credit the channel announced)."""
    if isinstance(channel, LocalInputChannel):
        view = channel.view
        if view is None:
            return "local, its subpartition not requested yet"
        readable, _ = view.get_availability_and_backlog(True)
        return (f"local, its subpartition holds {view.number_of_queued_buffers} buffers "
                f"({'data readable' if readable else 'nothing readable yet'})")
    remote = cast(RemoteInputChannel, channel)  # the only other kind
    state = (f"remote, {remote.queue_length} buffers queued, {remote.buffer_manager.available} free buffers for "
             f"the sender ({remote.initial_credit} exclusive), {remote.unannounced_credit} credit not yet announced")
    client = remote.client
    if isinstance(client, CreditBasedPartitionRequestClientHandler) and client.waiting_for_buffer_of is not None:
        blocking = client.waiting_for_buffer_of
        state += (f", its connection (without credit) reading nothing until {blocking.gate.owner_name} frees a "
                  f"buffer for its channel {blocking.channel_index} of gate {blocking.gate.gate_index}")
    return state

