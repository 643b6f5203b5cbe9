"""Network settings of one TaskManager's shuffle environment, with Flink's defaults.

Units are bytes and seconds. The names follow Flink's configuration keys
(`taskmanager.memory.segment-size`, `taskmanager.network.memory.buffers-per-channel`, ...).
"""

from __future__ import annotations

from dataclasses import dataclass

from shuffle.java_int import INT_MAX

FLOW_CONTROL_MODES = ("credit", "tcp")
#: Default frame limit, and the room above one buffer any limit must leave for frame headers.
DEFAULT_MAX_FRAME_SIZE = 1024 * 1024
FRAME_HEADROOM = 64 * 1024
#: Default bound on the partition requests one connection carries (readers per connection).
DEFAULT_MAX_RECEIVERS = 16384


@dataclass(frozen=True)
class NetworkConfig:
    """Flink's network-stack knobs (spec section 1.1) plus the simulated link's."""

    buffer_size: int = 32 * 1024
    exclusive_buffers_per_channel: int = 2
    floating_buffers_per_gate: int = 8
    max_buffers_per_channel: int = 10
    # Flink 2.3 hard-codes 20 (NettyShuffleEnvironmentConfiguration; 1.x's option defaulted to 5).
    max_overdraft_buffers_per_gate: int = 20
    # Seconds; 0 flushes after every record, -1 flushes only full buffers.
    buffer_timeout: float = 0.1
    flow_control: str = "credit"
    network_memory: int = 64 * 1024 * 1024
    # Buffer debloating (FLIP-183, spec 6.1): `taskmanager.network.memory.buffer-debloat.*`;
    # sizes between `taskmanager.memory.min-segment-size` and the buffer size, starting at
    # `taskmanager.memory.starting-segment-size`.
    debloat: bool = False
    debloat_target: float = 1.0
    debloat_period: float = 0.2
    debloat_samples: int = 20
    debloat_threshold_percentages: int = 25
    min_segment_size: int = 256
    starting_segment_size: int = 1024
    exclusive_buffers_request_timeout: float = 30.0
    request_backoff_initial: float = 0.1
    request_backoff_max: float = 10.0
    partition_request_timeout: float = 10.0
    # Simulated link (sim mode only): 10 Gbit/s, 50 us. `send_window`: the bytes a connection
    # holds between the writer and the reader (the kernel's socket buffers). Flink leaves
    # SO_SNDBUF/SO_RCVBUF to the OS (taskmanager.network.netty.sendReceiveBufferSize = 0) and
    # its server writes one BufferResponse at a time, so Netty's 64 KiB high watermark never
    # gates it; Linux autotunes the send buffer to ~2x the congestion window. None: that,
    # 2 x bandwidth x round trip, at least 64 KiB and at most 4 MiB (tcp_wmem's maximum).
    link_bandwidth: float = 10e9 / 8
    link_latency: float = 50e-6
    send_window: int | None = None
    # What a Java thread's sleep adds to its duration (sim mode only; realtime sleeps have
    # their own): Flink's OutputFlusher sleeps `buffer_timeout` and then flushes, so its
    # period is the timeout plus this, and drifts against paced sources. Measured with
    # OpenJDK 17 on Linux: Thread.sleep(1 ms / 10 ms / 100 ms) overshoots by a median
    # 93 / 104 / 150 us.
    flusher_sleep_overshoot: float = 100e-6
    # Largest Netty frame a connection accepts; a longer one is refused from its length
    # field (before it is buffered) and closes the connection. None: 1 MiB, or one buffer
    # plus 64 KiB when buffers are larger (`frame_size_limit`).
    max_frame_size: int | None = None
    # What one consumer connection may hold on the serving TaskManager: partition requests
    # (served readers plus requests waiting for their partition; more close the connection),
    # and seconds to send its first request after the handshake (a connection that idles
    # until then is closed).
    max_partition_requests_per_connection: int = DEFAULT_MAX_RECEIVERS
    first_request_timeout: float = 10.0

    def __post_init__(self) -> None:
        if self.buffer_size < 64:
            raise ValueError(f"buffer_size must be at least 64 bytes, got {self.buffer_size}")
        if self.exclusive_buffers_per_channel < 0:
            raise ValueError("exclusive_buffers_per_channel must be >= 0")
        if self.floating_buffers_per_gate < 1:
            raise ValueError("floating_buffers_per_gate must be >= 1")
        if self.max_buffers_per_channel < 1:
            raise ValueError("max_buffers_per_channel must be >= 1")
        if self.max_overdraft_buffers_per_gate < 0:
            raise ValueError("max_overdraft_buffers_per_gate must be >= 0")
        if self.buffer_timeout < 0 and self.buffer_timeout != -1:
            raise ValueError(f"buffer_timeout must be >= 0 or -1, got {self.buffer_timeout}")
        if self.flow_control not in FLOW_CONTROL_MODES:
            raise ValueError(f"flow_control must be one of {FLOW_CONTROL_MODES}, got {self.flow_control!r}")
        if self.network_memory < self.buffer_size:
            raise ValueError("network_memory must hold at least one buffer")
        window_ok = self.send_window is None or self.send_window >= 1
        if self.link_bandwidth <= 0 or self.link_latency < 0 or not window_ok:
            raise ValueError("link_bandwidth must be > 0, link_latency >= 0, send_window >= 1 (or None)")
        if self.flusher_sleep_overshoot < 0:
            raise ValueError("flusher_sleep_overshoot must be >= 0")
        if self.max_partition_requests_per_connection < 1 or self.first_request_timeout <= 0:
            raise ValueError("max_partition_requests_per_connection must be >= 1, first_request_timeout > 0")
        if self.debloat_target <= 0 or self.debloat_period <= 0 or self.debloat_samples < 1:
            raise ValueError("debloat_target and debloat_period must be > 0, debloat_samples >= 1")
        if self.debloat_threshold_percentages < 0:
            raise ValueError("debloat_threshold_percentages must be >= 0")
        if self.min_segment_size < 1:
            raise ValueError(f"min_segment_size must be >= 1, got {self.min_segment_size}")
        if self.debloat and not self.min_segment_size <= self.starting_segment_size <= self.buffer_size:
            raise ValueError("debloating needs min_segment_size <= starting_segment_size <= buffer_size, got "
                             f"{self.min_segment_size}, {self.starting_segment_size}, {self.buffer_size}")
        if self.max_frame_size is not None and self.max_frame_size < self.buffer_size + FRAME_HEADROOM:
            raise ValueError(f"max_frame_size must be at least buffer_size + {FRAME_HEADROOM} bytes of headers "
                             f"({self.buffer_size + FRAME_HEADROOM}), got {self.max_frame_size}")

    @property
    def socket_window(self) -> int:
        """The simulated link's send window: `send_window`, or autotuned (see above)."""
        if self.send_window is not None:
            return self.send_window
        return int(min(4 * 1024 * 1024, max(64 * 1024, 2 * self.link_bandwidth * 2 * self.link_latency)))

    @property
    def frame_size_limit(self) -> int:
        """The largest frame accepted (`max_frame_size`, or its default for `buffer_size`)."""
        if self.max_frame_size is not None:
            return self.max_frame_size
        return max(DEFAULT_MAX_FRAME_SIZE, self.buffer_size + FRAME_HEADROOM)

    @property
    def starting_buffer_size(self) -> int:
        """The size a producer's subpartitions start with: the starting segment size when
        debloating (the debloater starts there too), else unlimited (Flink's MAX_VALUE)."""
        return self.starting_segment_size if self.debloat else INT_MAX

    @property
    def num_network_buffers(self) -> int:
        """Segments of the TaskManager's NetworkBufferPool."""
        return self.network_memory // self.buffer_size

    @property
    def credit_based(self) -> bool:
        return self.flow_control == "credit"
