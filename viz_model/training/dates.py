"""Generated training data for the shipped encoder-decoder: dates written many ways -> ISO 8601.

Formats (and their lower-case variants): ``3 March 2021``, ``3 Mar 2021``, ``March 3, 2021``,
``Mar 3rd 2021``, ``Wednesday, March 3, 2021``, ``3rd of March 2021``; years 1900-2099. A fixed 5 % of
the calendar dates (chosen by a hash of the date, so the same on every run) is held out: the model never
sees them in any format during training, and its accuracy is measured on them.
"""

from __future__ import annotations

import datetime
import hashlib
import random

FIRST, LAST = datetime.date(1900, 1, 1), datetime.date(2099, 12, 31)
N_DAYS = (LAST - FIRST).days + 1


def ordinal(day: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``4th`` … ``11th``, ``12th``, ``13th`` … ``21st``, ``31st``."""
    suffix = "th" if 11 <= day % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{day}{suffix}"


MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]  # date.weekday() order


def _month(d: datetime.date) -> str:
    return MONTHS[d.month - 1]


FORMATS = {  # English names whatever the machine's locale (no strftime)
    "D Month YYYY": lambda d: f"{d.day} {_month(d)} {d.year}",
    "D Mon YYYY": lambda d: f"{d.day} {_month(d)[:3]} {d.year}",
    "Month D, YYYY": lambda d: f"{_month(d)} {d.day}, {d.year}",
    "Mon Dth YYYY": lambda d: f"{_month(d)[:3]} {ordinal(d.day)} {d.year}",
    "Weekday, Month D, YYYY": lambda d: f"{WEEKDAYS[d.weekday()]}, {_month(d)} {d.day}, {d.year}",
    "Dth of Month YYYY": lambda d: f"{ordinal(d.day)} of {_month(d)} {d.year}",
}


def write_date(date: datetime.date, fmt: str, lower: bool = False) -> str:
    """``date`` written in format ``fmt`` (a key of :data:`FORMATS`), optionally lower-cased."""
    text = FORMATS[fmt](date)
    return text.lower() if lower else text


def is_held_out(date: datetime.date) -> bool:
    """Whether ``date`` belongs to the fixed 5 % of dates never used for training."""
    return hashlib.sha256(date.isoformat().encode()).digest()[0] < 13  # 13/256 ≈ 5.1 %


def sample_pairs(n: int, seed: int, held_out: bool = False) -> list[tuple[str, str]]:
    """``n`` random (written date, ISO date) pairs from the training dates, or from the held-out ones."""
    rng = random.Random(seed)
    pairs = []
    fmts = list(FORMATS)
    while len(pairs) < n:
        date = FIRST + datetime.timedelta(days=rng.randrange(N_DAYS))
        if is_held_out(date) != held_out:
            continue
        pairs.append((write_date(date, rng.choice(fmts), lower=rng.random() < 0.3), date.isoformat()))
    return pairs
