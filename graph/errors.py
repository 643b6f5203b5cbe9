"""Exceptions for programs Flink rejects (same messages as Flink)."""


class UnsupportedOperationException(Exception):
    """Flink's ``java.lang.UnsupportedOperationException``: the program is not allowed."""


class IllegalStateException(Exception):
    """Flink's ``java.lang.IllegalStateException``: the graph is inconsistent."""
