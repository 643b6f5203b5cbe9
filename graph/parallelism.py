"""Parallelism rules: validation of user values and Flink's default max parallelism."""

from __future__ import annotations

from graph.errors import IllegalArgumentException

UPPER_BOUND_MAX_PARALLELISM = 1 << 15  # KeyGroupRangeAssignment.UPPER_BOUND_MAX_PARALLELISM
DEFAULT_LOWER_BOUND_MAX_PARALLELISM = 1 << 7


def default_max_parallelism(parallelism: int) -> int:
    """Flink's ``computeDefaultMaxParallelism``:
    min(max(roundUpToPowerOfTwo(p + p/2), 128), 32768)."""
    wanted = parallelism + parallelism // 2
    power = 1 << max(wanted - 1, 0).bit_length()
    return min(max(power, DEFAULT_LOWER_BOUND_MAX_PARALLELISM), UPPER_BOUND_MAX_PARALLELISM)


def resolve_max_parallelism(max_parallelism: int, parallelism: int) -> int:
    """The configured max parallelism, or the default rule where it is -1."""
    return max_parallelism if max_parallelism > 0 else default_max_parallelism(parallelism)


def check_parallelism(parallelism: object, environment: bool = False) -> int:
    """At least 1, with Flink's messages: the environment's (``ExecutionConfig.setParallelism``)
    or an operator's (``OperatorValidationUtils.validateParallelism``). Flink's -1
    (``PARALLELISM_DEFAULT``) is not accepted here (README, differences)."""
    if isinstance(parallelism, bool) or not isinstance(parallelism, int):
        raise TypeError(f"parallelism must be an int, got {parallelism!r}")
    if parallelism < 1:
        raise IllegalArgumentException(
            "Parallelism must be at least one, or ExecutionConfig.PARALLELISM_DEFAULT (use system default)."
            if environment else
            "The parallelism of an operator must be at least 1, or ExecutionConfig.PARALLELISM_DEFAULT "
            "(use system default).")
    return parallelism


def check_max_parallelism(max_parallelism: object, environment: bool = False) -> int:
    """Flink's bounds, 0 < max parallelism <= 32768, with Flink's messages: the environment's
    (``StreamExecutionEnvironment.setMaxParallelism``) or an operator's
    (``OperatorValidationUtils.validateMaxParallelism``). A parallelism above it is refused
    only when the job is scheduled (``build_execution_graph``), as in Flink."""
    if isinstance(max_parallelism, bool) or not isinstance(max_parallelism, int):
        raise TypeError(f"max parallelism must be an int, got {max_parallelism!r}")
    bound = UPPER_BOUND_MAX_PARALLELISM
    if environment and not 0 < max_parallelism <= bound:
        raise IllegalArgumentException(
            f"maxParallelism is out of bounds 0 < maxParallelism <= {bound}. Found: {max_parallelism}")
    if max_parallelism <= 0:
        raise IllegalArgumentException("The maximum parallelism must be greater than 0.")
    if max_parallelism > bound:
        raise IllegalArgumentException(f"Maximum parallelism must be between 1 and {bound}. Found: {max_parallelism}")
    return max_parallelism
