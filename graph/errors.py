"""Exceptions for programs Flink rejects (same messages as Flink)."""


class UnsupportedOperationException(Exception):
    """Flink's ``java.lang.UnsupportedOperationException``: the program is not allowed."""


class IllegalStateException(Exception):
    """Flink's ``java.lang.IllegalStateException``: the graph is inconsistent."""


class IllegalArgumentException(ValueError):
    """Flink's ``java.lang.IllegalArgumentException``: a value the program gave is wrong."""


class JobException(Exception):
    """Flink's ``org.apache.flink.runtime.JobException``: the JobGraph cannot be scheduled."""
