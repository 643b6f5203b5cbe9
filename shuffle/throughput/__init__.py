"""Buffer debloating (FLIP-183, spec section 6): throughput measured per input gate, the
buffer size it asks of the producers, and the averaging between the two."""

from shuffle.throughput.buffer_debloater import BufferDebloater
from shuffle.throughput.buffer_size_ema import BufferSizeEMA
from shuffle.throughput.throughput_calculator import ThroughputCalculator

__all__ = ["BufferDebloater", "BufferSizeEMA", "ThroughputCalculator"]
