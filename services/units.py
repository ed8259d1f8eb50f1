"""Formatting of measured values for people: N/A for what the pod could not measure, never 0."""

from __future__ import annotations

NA = "N/A"
GIB = 1024**3


def fmt_num(value: float | None, digits: int = 0) -> str:
    if value is None:
        return NA
    return f"{value:.{digits}f}"


def fmt_bytes(value: int | None) -> str:
    """Bytes as the largest binary unit that keeps the number readable (e.g. 61.4 GiB)."""
    if value is None:
        return NA
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return NA
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {(s % 3600) // 60:02d} min"


def whole_duration(seconds: float) -> str:
    """A wait in whole seconds for a message read later: "95 s", "12 min", "3 h 5 min"."""
    s = max(0, int(seconds))
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min"
    return f"{s // 3600} h {(s % 3600) // 60} min"


def short_duration(seconds: float) -> str:
    """An age or a wait in an alert's sentence: "4.2 s", "95 s", "12 min", "3 h 5 min"."""
    if seconds < 10:
        return f"{max(0.0, seconds):.1f} s"
    return whole_duration(seconds)
