"""The maintenance window's arithmetic (cuda13_upgrade.window): time zones, a day
the clocks change, a window across midnight, start days, cuda13_until, bad values."""

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from cuda13_upgrade import window as w

BERLIN = ZoneInfo("Europe/Berlin")


def at(text: str, zone=BERLIN) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=zone)


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_no_window_is_always_open():
    assert w.parse_window({}) is None
    assert w.parse_window(None) is None
    assert w.is_open(None, utc("2026-01-01T12:00"))
    assert w.closes_at(None, utc("2026-01-01T12:00")) is None


def test_a_window_in_its_time_zone():
    night = w.parse_window({"start": "22:00", "end": "23:30", "timezone": "America/New_York"})
    new_york = ZoneInfo("America/New_York")
    assert not w.is_open(night, at("2026-07-01T21:59", new_york))
    assert w.is_open(night, at("2026-07-01T22:00", new_york))  # opens at start
    assert w.is_open(night, utc("2026-07-02T03:29"))  # the same instant in UTC (EDT, -04:00)
    assert not w.is_open(night, at("2026-07-01T23:30", new_york))  # closed at end
    assert w.closes_at(night, utc("2026-07-02T02:10")) == utc("2026-07-02T03:30")


def test_a_window_across_midnight_belongs_to_the_day_it_starts():
    friday_night = w.parse_window(
        {"start": "22:00", "end": "06:00", "timezone": "Europe/Berlin", "days": ["fri"]}
    )
    # 2026-06-05 is a Friday
    assert w.is_open(friday_night, at("2026-06-05T23:00"))
    assert w.is_open(friday_night, at("2026-06-06T03:00"))  # Saturday morning: Friday's window
    assert w.closes_at(friday_night, at("2026-06-06T03:00")) == at("2026-06-06T06:00").astimezone(UTC)
    assert not w.is_open(friday_night, at("2026-06-06T06:00"))
    assert not w.is_open(friday_night, at("2026-06-05T03:00"))  # Friday morning: Thursday's, not listed
    assert not w.is_open(friday_night, at("2026-06-06T23:00"))  # Saturday night: not listed
    assert w.opens_at(friday_night, at("2026-06-06T07:00")) == at("2026-06-12T22:00").astimezone(UTC)
    assert w.opens_at(friday_night, at("2026-06-05T23:00")) == at("2026-06-05T23:00").astimezone(UTC)


def test_a_window_on_the_day_the_clocks_go_forward_lasts_its_real_length():
    # Europe/Berlin, 2026-03-29: 02:00 CET becomes 03:00 CEST (01:00 UTC).
    early = w.parse_window({"start": "01:00", "end": "05:00", "timezone": "Europe/Berlin"})
    assert w.is_open(early, utc("2026-03-29T00:00"))  # 01:00 CET
    assert w.is_open(early, utc("2026-03-29T02:59"))  # 04:59 CEST
    assert not w.is_open(early, utc("2026-03-29T03:00"))  # 05:00 CEST
    assert w.closes_at(early, utc("2026-03-29T01:30")) - utc("2026-03-29T00:00") == (
        utc("2026-03-29T03:00") - utc("2026-03-29T00:00")
    )  # three hours, not four
    # a start the clocks skip (02:30) is taken with the offset before the change: 03:30 CEST
    skipped = w.parse_window({"start": "02:30", "end": "04:00", "timezone": "Europe/Berlin"})
    assert not w.is_open(skipped, utc("2026-03-29T01:29"))  # 03:29 CEST
    assert w.is_open(skipped, utc("2026-03-29T01:30"))  # 03:30 CEST
    assert w.opens_at(skipped, utc("2026-03-29T00:00")) == utc("2026-03-29T01:30")


def test_a_window_on_the_day_the_clocks_go_back():
    # Europe/Berlin, 2026-10-25: 03:00 CEST becomes 02:00 CET (01:00 UTC); 02:30 happens twice.
    night = w.parse_window({"start": "22:00", "end": "02:30", "timezone": "Europe/Berlin", "days": ["sat"]})
    # Saturday 22:00 CEST (20:00 UTC) to the first 02:30 (CEST, 00:30 UTC): 4 h 30 min
    assert w.is_open(night, utc("2026-10-24T20:00"))
    assert w.closes_at(night, utc("2026-10-24T20:00")) == utc("2026-10-25T00:30")
    assert not w.is_open(night, utc("2026-10-25T01:15"))  # the second 02:15 (CET)


def test_start_days_and_full_names():
    weekdays = w.parse_window(
        {"start": "09:00", "end": "17:00", "timezone": "UTC", "days": ["Mon", "tuesday", "wed", "thu", "fri"]}
    )
    assert w.is_open(weekdays, utc("2026-06-08T10:00"))  # Monday
    assert not w.is_open(weekdays, utc("2026-06-07T10:00"))  # Sunday
    assert weekdays.describe() == "09:00-17:00 UTC, mon tue wed thu fri"
    assert w.parse_window({"start": "09:00", "end": "17:00", "timezone": "UTC"}).describe() == (
        "09:00-17:00 UTC, every day"
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("22:00-06:00", "cuda13_window is not a mapping: '22:00-06:00'. Option: cuda13_window."),
        ({"start": "22:00", "timezone": "UTC"}, "cuda13_window has no end"),
        (
            {"start": "25:00", "end": "06:00", "timezone": "UTC"},
            "cuda13_window start is not a time: '25:00'.",
        ),
        ({"start": "22:00", "end": "6:00", "timezone": "UTC"}, "cuda13_window end is not a time: '6:00'."),
        (
            {"start": 1320, "end": "06:00", "timezone": "UTC"},
            "cuda13_window start is not a time (YAML read an unquoted 22:00 as the number 1320): 1320. "
            'Option: cuda13_window. Fix: quote it: start: "22:00".',
        ),
        ({"start": "22:00", "end": "06:00"}, "cuda13_window timezone is missing or empty: None."),
        (
            {"start": "22:00", "end": "06:00", "timezone": "Europe/Berlln"},
            "cuda13_window timezone is not a time zone of the IANA database: 'Europe/Berlln'.",
        ),
        ({"start": "22:00", "end": "06:00", "timezone": "../etc/passwd"}, "cuda13_window timezone is not"),
        (
            {"start": "22:00", "end": "06:00", "timezone": "UTC", "days": ["fri", "funday"]},
            "cuda13_window days holds 'funday', which is not a day: ['fri', 'funday'].",
        ),
        ({"start": "22:00", "end": "22:00", "timezone": "UTC"}, "cuda13_window starts when it ends"),
        (
            {"start": "22:00", "end": "06:00", "timezone": "UTC", "tz": "x"},
            "cuda13_window has unknown keys ['tz']",
        ),
    ],
)
def test_bad_windows_name_the_value_and_the_option(value, message):
    with pytest.raises(ValueError) as error:
        w.parse_window(value)
    assert str(error.value).startswith(message)
    assert "Option: cuda13_window." in str(error.value)


def test_now_must_be_aware():
    with pytest.raises(ValueError, match="time zone"):
        w.is_open(None, datetime(2026, 1, 1))


def test_until_hh_mm_is_the_next_such_time():
    started = at("2026-06-05T23:00")
    assert w.parse_until("06:00", started, zone=BERLIN) == at("2026-06-06T06:00").astimezone(UTC)
    assert w.parse_until("23:30", started, zone=BERLIN) == at("2026-06-05T23:30").astimezone(UTC)
    assert w.parse_until("23:00", started, zone=BERLIN) == at("2026-06-06T23:00").astimezone(UTC)  # not now


def test_until_across_the_clock_change():
    # started Saturday 22:00 CET before the spring change; 06:00 Sunday is CEST (04:00 UTC)
    assert w.parse_until("06:00", at("2026-03-28T22:00"), zone=BERLIN) == utc("2026-03-29T04:00")


def test_until_iso():
    started = utc("2026-06-05T20:00")
    assert w.parse_until("2026-06-06T06:00+02:00", started) == utc("2026-06-06T04:00")
    assert w.parse_until("2026-06-06T04:00Z", started) == utc("2026-06-06T04:00")
    assert w.parse_until("2026-06-06T06:00", started, zone=BERLIN) == utc("2026-06-06T04:00")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("6am", "cuda13_until is not a time: '6am'. Option: cuda13_until."),
        ("2026-06-05T19:00Z", "cuda13_until is not after the run's start (2026-06-05T20:00:00Z)"),
        (360, "cuda13_until is not a time (an unquoted HH:MM in YAML is a number): 360."),
    ],
)
def test_bad_until(value, message):
    with pytest.raises(ValueError) as error:
        w.parse_until(value, utc("2026-06-05T20:00"))
    assert str(error.value).startswith(message)


def test_decide():
    night = w.parse_window({"start": "22:00", "end": "06:00", "timezone": "Europe/Berlin"})
    assert w.decide(night, None, at("2026-06-05T23:00")) == {
        "open": True,
        "reason": "",
        "closes_at": "2026-06-06T04:00:00Z",
        "opens_at": None,
    }
    # the earlier of the window's end and until
    assert (
        w.decide(night, utc("2026-06-06T01:00"), at("2026-06-05T23:00"))["closes_at"]
        == "2026-06-06T01:00:00Z"
    )
    shut = w.decide(night, None, at("2026-06-06T07:00"))
    assert shut["open"] is False
    assert shut["reason"] == (
        "outside the window cuda13_window (22:00-06:00 Europe/Berlin, every day); "
        "it opens next at 2026-06-06T20:00:00Z"
    )
    assert w.decide(None, utc("2026-06-06T01:00"), utc("2026-06-06T01:00")) == {
        "open": False,
        "reason": "past cuda13_until (2026-06-06T01:00:00Z)",
        "closes_at": None,
        "opens_at": None,
    }
    assert w.decide(None, None, utc("2026-06-06T01:00"))["open"] is True
