"""Generate the synthetic sign-up data of this folder (deterministic: a seeded numpy generator).

    python examples/make_signups.py [--output-dir examples]

writes
  signups_daily.csv  date,signups: one row per day from 2025-01-01 through 2027-01-01 (731 days),
                     0 … 50 sign-ups a day (3 days of 0), 30 days missing at random (no row: no
                     data that day, a step of input 0 when counted);
  signups.csv        date,user_id,country: one row per sign-up, the same daily totals; returning
                     users sign up on several days, a few several times a day, mostly in their
                     home country;
  countries.txt      the 50 public country keys, one per line.

The data is synthetic: no person is in it. It exists to try the commands of README.md.
"""

from __future__ import annotations

import argparse
from datetime import date, timedelta
from pathlib import Path

import numpy as np

SEED = 20250101
FIRST, LAST = date(2025, 1, 1), date(2027, 1, 1)
MAX_PER_DAY = 50
MISSING_DAYS = 30
OUTAGE_DAYS = 3  # days with a row of 0 sign-ups
COUNTRIES = (
    "US DE FR GB IN BR JP CA IT ES MX NL AU KR SE PL CH BE AT NO DK FI IE PT CZ "
    "GR HU RO TR IL ZA NG EG KE AR CL CO PE ID PH VN TH MY SG NZ CN TW UA SK HR"
).split()
RETURNING = 0.3  # share of sign-ups by a user seen before
AGAIN_SAME_DAY = 0.015  # share of sign-ups that repeat the day's previous user
ABROAD = 0.1  # share of sign-ups outside the user's home country


def daily_totals(rng: np.random.Generator, days: int, first: date) -> np.ndarray:
    """Sign-ups per day: a growing trend, fewer at weekends, a summer dip, Poisson noise, in [0, 50]."""
    t = np.arange(days)
    weekday = np.array([(first + timedelta(days=int(d))).weekday() for d in t])
    trend = 14 + 16 * t / days
    weekly = np.where(weekday >= 5, 0.65, 1.0)
    yearly = 1 - 0.2 * np.exp(-(((t % 365) - 215) ** 2) / (2 * 20**2))  # early August
    totals = rng.poisson(trend * weekly * yearly)
    totals[rng.choice(days, size=OUTAGE_DAYS, replace=False)] = 0
    return np.clip(totals, 0, MAX_PER_DAY)


def make(output_dir: Path) -> dict[str, int]:
    rng = np.random.default_rng(SEED)
    days = (LAST - FIRST).days + 1
    totals = daily_totals(rng, days, FIRST)
    missing = set(rng.choice(np.arange(1, days - 1), size=MISSING_DAYS, replace=False).tolist())  # first and last day kept
    weights = 1 / np.arange(1, len(COUNTRIES) + 1) ** 1.1  # a few large countries, a long tail
    weights /= weights.sum()
    homes: list[int] = []  # the home country of user i
    daily_lines, event_lines = ["date,signups"], ["date,user_id,country"]
    for day in range(days):
        if day in missing:
            continue
        when = (FIRST + timedelta(days=day)).isoformat()
        daily_lines.append(f"{when},{totals[day]}")
        previous = None
        for _ in range(int(totals[day])):
            draw = rng.random()
            if previous is not None and draw < AGAIN_SAME_DAY:
                user = previous
            elif homes and draw < AGAIN_SAME_DAY + RETURNING:
                user = len(homes) - 1 - (int(rng.geometric(1 / 400)) - 1) % len(homes)  # recent users return more
            else:
                homes.append(int(rng.choice(len(COUNTRIES), p=weights)))
                user = len(homes) - 1
            country = homes[user] if rng.random() >= ABROAD else int(rng.choice(len(COUNTRIES), p=weights))
            event_lines.append(f"{when},u{user + 1:05d},{COUNTRIES[country]}")
            previous = user
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "signups_daily.csv").write_text("\n".join(daily_lines) + "\n", encoding="utf-8")
    (output_dir / "signups.csv").write_text("\n".join(event_lines) + "\n", encoding="utf-8")
    (output_dir / "countries.txt").write_text("\n".join(COUNTRIES) + "\n", encoding="utf-8")
    return {"days": len(daily_lines) - 1, "signups": len(event_lines) - 1, "users": len(homes)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", type=Path, default=Path(__file__).resolve().parent)
    summary = make(parser.parse_args().output_dir)
    print(", ".join(f"{value} {name}" for name, value in summary.items()))


if __name__ == "__main__":
    main()
