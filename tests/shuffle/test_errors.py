"""Errors cross the wire by type: the consumer gets back the class the producer raised."""

from shuffle.errors import (
    CreditViolationError,
    PartitionNotFoundError,
    ProtocolError,
    RemoteError,
    error_from_wire,
)


def test_known_errors_come_back_as_their_own_class_with_the_senders_message():
    error = error_from_wire("CreditViolationError", "no credit available")
    assert type(error) is CreditViolationError and isinstance(error, ProtocolError)
    assert str(error) == "no credit available"
    missing = error_from_wire("PartitionNotFoundError", "Partition ds0#1 not found.")
    assert isinstance(missing, PartitionNotFoundError) and str(missing) == "Partition ds0#1 not found."


def test_unknown_errors_are_remote_errors_naming_the_class():
    error = error_from_wire("ZeroDivisionError", "division by zero")
    assert type(error) is RemoteError and str(error) == "ZeroDivisionError: division by zero"
