"""Route parity: every feature works on every route, or is refused with the one reason of the
parity table (``engines.spec.REFUSED``), and docs/streaming.md shows that same table.

Each route runs one ``CountSpec`` on the same small data with a seeded generator. Within a
family of routes that run the same counter the releases must be equal: one value per line
(``count`` on lines, ``Counter``) and event rows (``count`` on event rows, one stream or keyed,
``KeyedCounters``, the DataFrame function, Spark). A refused pair must fail with the table's
reason, as one ``error:`` line on the command line."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import pytest

from pure_dp_mf.engines import spec as specs
from pure_dp_mf.engines.calendar import Calendar
from pure_dp_mf.engines.spec import CountSpec, Publication
from pure_dp_mf.errors import InvalidInputError
from tests.conftest import ROOT, run_main

SEED = 11
HORIZON = 8
KEYS = ("a", "b", "c")
# (key, step, user, value): steps 1 … 8, a few users, values ≤ 2
EVENTS = [
    ("a", 1, "u1", 1),
    ("b", 1, "u2", 2),
    ("a", 2, "u1", 1),
    ("a", 2, "u3", 1),
    ("c", 3, "u2", 1),
    ("a", 4, "u4", 2),
    ("b", 4, "u1", 1),
    ("c", 4, "u1", 1),
    ("b", 6, "u3", 1),
    ("a", 7, "u2", 1),
    ("c", 8, "u4", 2),
]
LINES = [1, 0, 2, 1, 0, 0, 1, 2]  # one stream's values per step (max 2)
START = "2025-03-01"
BUDGET = "route-parity"

LINE_ROUTES = ("cli-lines", "counter")
ROW_ROUTES = ("cli-rows", "cli-keyed", "keyed-counters", "dataframe")
ONE_STREAM_FEATURES = ("one-stream", "unit-step")
FAMILIES = {route: "lines" for route in LINE_ROUTES} | {route: "rows" for route in ROW_ROUTES}


def feature_options(feature: str, tmp_path: Path) -> dict:
    """The spec options (beyond ε = 1, horizon 8, m = 2, the seed) that ask for ``feature``."""
    return {
        "base": {},
        "one-stream": {"keys": None},
        "dates": {"calendar": Calendar.parse(start=START)},
        "unit-step": {"privacy_unit": "step", "keys": None},
        "unit-event": {"privacy_unit": "event"},
        "unit-user-step": {"privacy_unit": "user-step", "max_keys": 2},
        "unit-user": {"privacy_unit": "user", "max_keys": 2, "max_per_key": 3},
        "state": {"state": tmp_path / "run.state"},
        "anytime": {"horizon": None, "through": HORIZON},
        "extend": {"extend": True, "through": HORIZON + 3},
        "monotone": {"monotone": True},
        "simultaneous": {"band": "simultaneous"},
        "invalid-policy": {"invalid": "clamp"},
        "invalid-stop": {"invalid": "stop"},
        "budget": {"budget": BUDGET},
        "key-file": {"key_file": tmp_path / "run.key"},  # a publication each: one key file is one publication
        "dimension": {"dimension": 2},
        "certificate": {"certificate": ROOT / "certificates" / "k004_maxse.json"},
        "tree": {"mechanism": "binary"},
    }[feature]


FEATURES_TESTED = (
    "base",
    "one-stream",
    "dates",
    "unit-step",
    "unit-event",
    "unit-user-step",
    "unit-user",
    "state",
    "anytime",
    "extend",
    "monotone",
    "simultaneous",
    "invalid-policy",
    "invalid-stop",
    "budget",
    "key-file",
    "dimension",
    "certificate",
    "tree",
)


def make_spec(route: str, options: dict) -> CountSpec:
    """The spec of ``route`` with ``options``: one value per line for the line routes, event
    rows (keyed by default) for the others."""
    options = dict(options)
    lines = FAMILIES[route] == "lines"
    keys = options.pop("keys", KEYS)
    state = options.pop("state", None)
    budget = options.pop("budget", None)
    key_file = options.pop("key_file", None)
    if lines:
        keys = None
        options.setdefault("privacy_unit", "step")
        options.pop("through", None)
    if options.get("extend") and route.startswith("cli"):
        options["extend"] = True
    return CountSpec(
        epsilon=1.0,
        horizon=options.pop("horizon", HORIZON),
        max_value=2,
        keys=None if route == "cli-rows" else keys,
        rows=not lines,
        publication=Publication(seed=None if key_file else SEED, state=state, budget=budget, key_file=key_file),
        **options,
    )


# ---------------------------------------------------------------------------- route runners


def _cli_flags(spec: CountSpec) -> list[str]:
    flags = ["--epsilon", "1", "--max-value", str(spec.max_value), "--format", "csv"]
    publication = spec.publication
    flags += ["--seed", str(SEED)] if publication.seed is not None else ["--key-file", str(publication.key_file)]
    if publication.budget is not None:
        flags += ["--budget", publication.budget]
    if spec.horizon is not None:
        flags += ["--horizon", str(spec.horizon)]
    if spec.through is not None:
        flags += ["--through", str(spec.through)]
    for name, flag in (("mechanism", "--mechanism"), ("band", "--band"), ("invalid", "--invalid")):
        flags += [flag, str(getattr(spec, name))]
    if spec.privacy_unit is not None:
        flags += ["--privacy-unit", spec.privacy_unit]
    for name, flag in (("max_keys", "--max-keys"), ("max_per_key", "--max-per-key"), ("certificate", "--certificate")):
        if getattr(spec, name) is not None:
            flags += [flag, str(getattr(spec, name))]
    if spec.dimension != 1:
        flags += ["--dimension", str(spec.dimension)]
    if spec.monotone:
        flags += ["--monotone"]
    if spec.calendar is not None:
        flags += ["--start", START]
    if spec.extend:
        flags += ["--extend"]
    if spec.publication.state is not None:
        flags += ["--state", str(spec.publication.state)]
    return flags


def _rows_of_csv(text: str, *, keyed: bool) -> list[tuple]:
    rows = list(csv.DictReader(io.StringIO(text)))
    return [
        (row["key"] if keyed else "count", int(row["step"]), int(row["count"]), int(row["lower"]), int(row["upper"]))
        for row in rows
    ]


def _event_file(tmp_path: Path, spec: CountSpec, *, keyed: bool) -> Path:
    path = tmp_path / "events.csv"
    calendar = spec.calendar
    with open(path, "w", encoding="utf-8") as out:
        out.write("key,step,user,value\n")
        for key, step, user, value in EVENTS:
            when = calendar.period(step) if calendar is not None else str(step)
            if keyed or key == "a":
                out.write(f"{key},{when},{user},{value}\n")
    return path


def _ensure_budget() -> None:
    """The budget the "budget" feature charges, in this process's registry."""
    from pure_dp_mf.engines.budget import Budget, BudgetError

    try:
        Budget.open(BUDGET)
    except BudgetError:
        Budget.create(BUDGET, epsilon=1000)


def _event_frame(spec: CountSpec):
    """The events as a pandas DataFrame (key, step or date, user, value): key "a"'s alone for one stream."""
    import pandas as pd

    chosen = [event for event in EVENTS if spec.keys is not None or event[0] == "a"]
    when = [spec.calendar.period(t) if spec.calendar is not None else t for _, t, _, _ in chosen]
    return pd.DataFrame(
        {"key": [k for k, *_ in chosen], "step": when, "user": [u for *_, u, _ in chosen], "value": [v for *_, v in chosen]}
    )


def run_route(route: str, spec: CountSpec, tmp_path: Path) -> list[tuple]:
    """The released rows (key, step, count, lower, upper) of ``spec`` on ``route``."""
    if route == "counter":
        from pure_dp_mf.engines.counter import Counter

        with Counter.from_spec(spec) as counter:
            released = counter.release(LINES if spec.dimension == 1 else [[v, 0] for v in LINES])
        if released.lower is None:
            return [("count", int(t), *map(int, c), 0, 0) for t, c in zip(released.steps, released.counts, strict=True)]
        return [
            ("count", int(t), int(c), int(lo), int(hi))
            for t, c, lo, hi in zip(released.steps, released.counts, released.lower, released.upper, strict=True)
        ]
    if route == "dataframe":
        from pure_dp_mf.engines.dataframe import private_running_counts

        one = spec.keys is None
        frame = _event_frame(spec)
        users = spec.privacy_unit in ("user", "user-step")
        result = private_running_counts(
            frame,
            spec=spec.replace(keys=("count",)) if one else spec,
            key_column=None if one else "key",
            value_column="value",
            user_column="user" if users else None,
        )
        return [(str(row.key), int(row.step), int(row.count), int(row.lower), int(row.upper)) for row in result.itertuples()]
    if route == "keyed-counters":
        from pure_dp_mf.engines.keyed import KeyedCounters, KeyedEvent, run_keyed

        spec.check_route(route)
        keys = spec.keys or ("count",)
        counters = KeyedCounters.from_spec(spec)
        events = [KeyedEvent(key=k if spec.keys else "count", step=t, value=v, user=u) for k, t, u, v in EVENTS]
        if spec.keys is None:
            events = [e for (k, *_), e in zip(EVENTS, events, strict=True) if k == "a"]
        beta = spec.step_beta(intervals=len(keys) * (spec.schedule() or HORIZON))
        rows = []
        try:
            for step, counts, _std, lower, upper in run_keyed(counters, events, beta=beta, through=spec.schedule()):
                rows += [(key, step, int(c), int(lo), int(hi)) for key, c, lo, hi in zip(keys, counts, lower, upper, strict=True)]
        finally:
            counters.close()
        return sorted(rows, key=lambda row: (row[1], keys.index(row[0])))
    # the command line
    flags = _cli_flags(spec)
    if route == "cli-lines":
        values = LINES if spec.dimension == 1 else [f"{v},0" for v in LINES]
        if spec.dimension != 1:
            flags[flags.index("csv")] = "plain"
        code, out, err = run_main("count", *flags, stdin="".join(f"{v}\n" for v in values))
    else:
        keyed = route == "cli-keyed"
        events = _event_file(tmp_path, spec, keyed=keyed)
        flags += ["--step-column", "step", "--column", "value"]
        if spec.privacy_unit in ("user", "user-step"):
            flags += ["--user-column", "user"]
        if keyed:
            keys_file = tmp_path / "keys.txt"
            keys_file.write_text("".join(f"{key}\n" for key in spec.keys or ()))
            flags += ["--key-column", "key", "--keys", str(keys_file)]
        code, out, err = run_main("count", str(events), *flags)
    if code != 0:
        message = err.strip().splitlines()[-1] if err.strip() else ""
        assert code == 2 and len([line for line in err.splitlines() if line.startswith("error: ")]) == 1, err
        raise InvalidInputError(message.removeprefix("error: "))
    if route == "cli-lines" and spec.dimension != 1:
        lines = [line.replace(",", " ").split() for line in out.splitlines() if line.strip()]
        return [("count", t, *map(int, line), 0, 0) for t, line in enumerate(lines, start=1)]
    if route == "cli-lines":
        return _rows_of_csv(out, keyed=False)
    return _rows_of_csv(out, keyed=route == "cli-keyed")


def outcome(route: str, feature: str, tmp_path: Path):
    """("rows", released rows) or ("refused", the reason)."""
    try:
        spec = make_spec(route, feature_options(feature, tmp_path))
        return "rows", run_route(route, spec, tmp_path)
    except InvalidInputError as error:
        return "refused", str(error)


@pytest.mark.parametrize("feature", FEATURES_TESTED)
def test_every_route_runs_a_feature_alike_or_refuses_it_from_the_table(feature, tmp_path):
    """Each route: the table's refusal where it lists one, else the same seeded releases as every
    other route of its family (with a key file: one publication, the same releases on every
    route that runs it)."""
    if feature == "budget":
        _ensure_budget()
    results = {}
    for route in (*LINE_ROUTES, *ROW_ROUTES):
        if route == "cli-keyed" and feature in ONE_STREAM_FEATURES:
            continue  # one stream of event rows is the route cli-rows
        folder = tmp_path / route
        folder.mkdir()
        results[route] = outcome(route, feature, folder)
    for route, (kind, value) in results.items():
        reason = specs.REFUSED.get((feature, route))
        if reason is not None:
            assert (kind, value) == ("refused", reason), (route, feature)
        elif kind == "refused":
            pytest.fail(f"{route} refuses {feature} outside the parity table: {value}")
    for family in ("lines", "rows"):
        released = {route: value for route, (kind, value) in results.items() if kind == "rows" and FAMILIES[route] == family}
        _check_family(family, released, feature)


def _check_family(family: str, released: dict, feature: str) -> None:
    """The routes of a family release the same rows: one value per line; event rows of one
    stream (the one key's, ``cli-rows`` beside the keyed routes run on one key); keyed."""
    if family == "rows" and feature not in ONE_STREAM_FEATURES:
        released = {route: rows for route, rows in released.items() if route != "cli-rows"}
    if feature == "key-file":  # each route its own secure key: the same rows released, other noise
        released = {route: [row[:2] for row in rows] for route, rows in released.items()}
    values = list(released.values())
    for route, rows in released.items():
        assert rows, route
        assert rows == values[0], (feature, route, list(released))


def test_the_docs_show_the_parity_table():
    """docs/streaming.md's "Route parity" section shows ``spec.REFUSED`` as it is
    (``spec.parity_markdown``: regenerate it with ``python -m pure_dp_mf.engines.spec``)."""
    text = (ROOT / "docs" / "streaming.md").read_text(encoding="utf-8")
    section = text.split("## Route parity", 1)[1].split("\n## ", 1)[0]
    assert specs.parity_markdown() in section


def test_the_table_names_known_features_and_routes():
    assert all(feature in specs.FEATURES and route in specs.ROUTES for feature, route in specs.REFUSED)
    assert np.all([isinstance(reason, str) and reason for reason in specs.REFUSED.values()])


def _spark_rows(spark, spec: CountSpec) -> list[tuple]:
    """The released rows of ``spec`` on Spark batch (the DataFrame API), collected."""

    from pure_dp_mf.engines import spark as spark_engine

    one = spec.keys is None
    frame = _event_frame(spec)
    users = spec.privacy_unit in ("user", "user-step")
    released = spark_engine.private_running_counts(
        spark.createDataFrame(frame),
        spec=spec.replace(keys=("count",)) if one else spec,
        key_column=None if one else "key",
        value_column="value",
        user_column="user" if users else None,
    ).toPandas()
    keys = ["count"] if one else list(spec.keys or ())
    rows = [(str(r.key), int(r.step), int(r.count), int(r.lower), int(r.upper)) for r in released.itertuples()]
    return sorted(rows, key=lambda row: (row[1], keys.index(row[0])))


@pytest.mark.slow
@pytest.mark.parametrize("feature", FEATURES_TESTED)
def test_spark_batch_runs_a_feature_as_the_local_engine_or_refuses_it_from_the_table(feature, spark, tmp_path):
    """Spark batch releases the local keyed engine's seeded rows, or the table's refusal."""
    (tmp_path / "local").mkdir()
    (tmp_path / "spark").mkdir()
    if feature == "budget":
        _ensure_budget()
    local = outcome("keyed-counters", feature, tmp_path / "local")
    try:
        spec = make_spec("keyed-counters", feature_options(feature, tmp_path / "spark"))
        result = ("rows", _spark_rows(spark, spec))
    except InvalidInputError as error:
        result = ("refused", str(error))
    reason = specs.REFUSED.get((feature, "spark-batch"))
    if reason is not None:
        assert result == ("refused", reason)
    elif feature == "key-file":  # a publication each (its own key): the same rows, other noise
        assert result[0] == local[0] == "rows" and [row[:2] for row in result[1]] == [row[:2] for row in local[1]]
    else:
        assert result == local, feature
