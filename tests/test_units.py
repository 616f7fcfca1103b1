import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpumodel.errors import UnitError
from gpumodel.units import format_quantity, parse_count, parse_quantity


@pytest.mark.parametrize(
    ("text", "dim", "value"),
    [
        ("3.35 TB/s", "bytes_per_s", 3.35e12),
        ("3.35TB/s", "bytes_per_s", 3.35e12),
        ("80 GB", "bytes", 80e9),
        ("50 MiB", "bytes", 50 * 2**20),
        ("48KiB", "bytes", 49152),
        ("989.4 TFLOP/s", "flop_per_s", 989.4e12),
        ("1979 TOP/s", "flop_per_s", 1979e12),
        ("1980 MHz", "hz", 1.98e9),
        ("700 W", "watts", 700),
        ("400 Gb/s", "bytes_per_s", 50e9),  # bits: 400e9 / 8
        ("5 us", "seconds", 5e-6),
        ("2.5 ms", "seconds", 2.5e-3),
        (1024, "bytes", 1024.0),
    ],
)
def test_parse_quantity(text, dim, value):
    assert parse_quantity(text, dim) == pytest.approx(value)


def test_si_and_iec_prefixes_are_distinct():
    assert parse_quantity("1 KB", "bytes") == 1000
    assert parse_quantity("1 KiB", "bytes") == 1024
    assert parse_quantity("1 GiB", "bytes") == 2**30


@pytest.mark.parametrize(
    ("text", "dim", "message"),
    [
        ("3.35 TB", "bytes_per_s", "is a size in bytes, expected a bandwidth"),
        ("80 GB/s", "bytes", "is a bandwidth, expected a size in bytes"),
        ("fast", "bytes", "expected a quantity like '80 GB'"),
        ("3 furlongs", "bytes", "unknown unit 'furlongs'"),
        ("-1 GB", "bytes", "must not be negative"),
        ("1 KiHz", "hz", "unknown unit"),
    ],
)
def test_parse_quantity_rejects(text, dim, message):
    with pytest.raises(UnitError, match=message):
        parse_quantity(text, dim)


@given(st.floats(min_value=1e-3, max_value=1e18, allow_nan=False))
def test_format_parse_round_trip(x):
    text = format_quantity(x, "B/s", digits=12)
    assert parse_quantity(text, "bytes_per_s") == pytest.approx(x, rel=1e-9)


def test_parse_count():
    assert parse_count("2T") == 2e12
    assert parse_count("7B") == 7e9
    with pytest.raises(UnitError):
        parse_count("lots")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.0009996, "1 ms"),  # 999.6 us shown with three digits is 1000 us: the next unit
        (0.000999, "999 µs"),
        (9.996e-7, "1 µs"),
        (0.99996, "1 s"),
        (119.96, "2 min"),
        (2.5e-3, "2.5 ms"),
    ],
)
def test_format_time_picks_the_unit_its_digits_need(seconds, text):
    from gpumodel.units import format_time

    assert format_time(seconds) == text


@pytest.mark.parametrize(
    ("value", "binary", "text"),
    [
        (999.96e9, False, "1 TB"),
        (999.4e9, False, "999 GB"),
        (999.6, False, "1 kB"),
        (1000 * 1024, True, "0.977 MiB"),  # 1000 KiB: three digits cannot show it in KiB
        (3.35e12, False, "3.35 TB"),
    ],
)
def test_format_quantity_picks_the_prefix_its_digits_need(value, binary, text):
    assert format_quantity(value, "B", binary=binary) == text


@pytest.mark.parametrize(("value", "text"), [(141.24e9, "141.2 GB"), (80e9, "80.0 GB"),
                                           (999.9e9, "999.9 GB"), (52_423.7e9, "52.42 TB")])
def test_format_gb_keeps_datasheet_gb_below_a_terabyte(value, text):
    from gpumodel.units import format_gb

    assert format_gb(value) == text


@given(st.floats(min_value=1.0, max_value=999e15), st.floats(min_value=1e-9, max_value=900 * 86400),
       st.booleans())
def test_formatted_numbers_never_show_an_exponent(x, seconds, binary):
    from gpumodel.units import format_time

    assert "e" not in format_quantity(x, "B", binary=binary).split()[0]
    assert "e" not in format_time(seconds).split()[0]


@pytest.mark.parametrize(
    ("count", "text"),
    [(1e12, "1T"), (3e11, "300B"), (7e9, "7B"), (4096, "4.1k"), (999.96e9, "1T"), (12, "12"),
     (2e15, "2e+15")],
)
def test_format_count_writes_what_parse_count_reads(count, text):
    from gpumodel.units import format_count

    assert format_count(count) == text
    assert parse_count(text) == pytest.approx(count, rel=0.01)


def test_the_html_report_shows_times_in_the_unit_their_digits_need():
    from gpumodel.report._html import fmt

    assert [fmt(v, "s") for v in (0.0009996, 0.000999, 9.996e-7, -0.0009996)] == [
        "1 ms", "999 µs", "1 µs", "-1 ms"]
