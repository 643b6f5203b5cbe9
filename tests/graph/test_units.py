import pytest

from graph.units import parse_bandwidth, parse_duration, parse_size


@pytest.mark.parametrize("text, seconds", [
    ("5ms", 0.005), ("30s", 30.0), ("2m", 120.0), ("100us", 1e-4), ("1.5s", 1.5), (2, 2.0),
    (0.25, 0.25), ("3", 3.0), (" 10 ms ", 0.01), ("1h", 3600.0), (-1, -1.0),
])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text, size", [
    ("32kb", 32768), ("64mb", 64 << 20), ("1gb", 1 << 30), (4096, 4096), ("0.5kb", 512), ("100b", 100),
])
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text, rate", [
    ("10gbit", 1.25e9), ("100mbit", 12.5e6), ("1gbps", 1.25e8), ("1gbyte", 1e9), ("500mb/s", 5e8),
    (1000, 1000.0),
])
def test_parse_bandwidth(text, rate):
    assert parse_bandwidth(text) == pytest.approx(rate)


@pytest.mark.parametrize("parse, value", [
    (parse_duration, "5 parsecs"), (parse_duration, ""), (parse_duration, None), (parse_duration, True),
    (parse_size, "12xb"), (parse_size, "1.3b"), (parse_size, -5), (parse_bandwidth, "fast"),
    (parse_bandwidth, 0),
])
def test_bad_values_name_the_value(parse, value):
    with pytest.raises(ValueError, match=repr(value).replace("(", r"\(")):
        parse(value)
