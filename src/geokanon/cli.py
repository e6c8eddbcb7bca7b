"""The ``geokanon`` command line: a thin layer over the library.

Exit codes: 0 done; 2 bad input or parameters; 3 release refused; 4 verification failed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from geokanon import __version__
from geokanon.errors import GeokanonError, InputError
from geokanon.policy import OutlierPolicy

EXAMPLES = {
    "classify": (
        "examples:\n"
        "  geokanon classify dwellings.csv --k 5 --r-max 100 --unit gm_code --crs EPSG:28992\n"
        "  geokanon classify visits.parquet --k 5 --r-max 250 --subject user_id --json\n"
    ),
    "demo": "example:\n  geokanon demo\n",
}


def _policy_options() -> argparse.ArgumentParser:
    """Options shared by every command that takes a policy (defined once)."""
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("policy")
    g.add_argument("--config", type=Path, help="TOML file with policy keys (k, r_max_m, tau, ...)")
    g.add_argument("--k", type=int, help="distinct subjects every published class must hold (>= 2)")
    g.add_argument("--r-max", dest="r_max_m", type=float, help="largest tolerated displacement, m")
    g.add_argument("--merge-ratio", type=float, help="iota threshold merge/generalise (2)")
    g.add_argument("--generalise-ratio", type=float, help="iota threshold generalise/suppress (4)")
    g.add_argument("--tau", type=float, help="global cap on the suppressed share (0.01)")
    g.add_argument("--unit-cap", type=float, help="per-unit cap on the suppressed share (0.10)")
    g.add_argument("--t-max", dest="t_max_s", type=float, help="tolerated time gap, seconds")
    g.add_argument(
        "--time-mode", choices=["absolute", "time_of_day"], help="absolute time or 24 h clock"
    )
    g.add_argument("--seed", type=int, help="seed of every random choice (0)")
    return p


def _input_options() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("input")
    g.add_argument(
        "input", type=Path, help="records: CSV, Parquet/GeoParquet, GeoPackage, GeoJSON, Shapefile"
    )
    g.add_argument("--x", help="x column in the CRS's units (default x)")
    g.add_argument("--y", help="y column in the CRS's units (default y)")
    g.add_argument("--lon", help="longitude column, degrees (default lon when there is no x)")
    g.add_argument("--lat", help="latitude column, degrees (default lat when there is no y)")
    g.add_argument("--crs", help="CRS of the coordinates if the file names none, e.g. EPSG:28992")
    g.add_argument("--coord-scale", type=float, help="multiply x/y by this for the CRS's units")
    g.add_argument("--working-crs", help="metric CRS for distances (default: chosen for lon/lat)")
    g.add_argument("--output-crs", help="CRS of published coordinates (default: the input's)")
    g.add_argument("--subject", help="subject id column (default: each record its own subject)")
    g.add_argument("--time", help="time column (ISO 8601 or epoch seconds)")
    g.add_argument("--timezone", help="IANA time zone of times without an offset, e.g. UTC")
    g.add_argument("--unit", help="administrative unit column")
    g.add_argument("--units", type=Path, help="unit polygon file (GeoPackage, GeoJSON, ...)")
    g.add_argument("--unit-id", help="unit id column of the --units file")
    g.add_argument("--unit-grid", type=float, metavar="M", help="square grid cells of M metres")
    return p


def _policy_from_args(args: argparse.Namespace) -> OutlierPolicy:
    values: dict[str, Any] = {}
    if getattr(args, "config", None) is not None:
        try:
            with open(args.config, "rb") as fh:
                config = tomllib.load(fh)
        except OSError:
            raise InputError(f"config file {str(args.config)!r} cannot be read") from None
        except tomllib.TOMLDecodeError as exc:
            raise InputError(f"config file {str(args.config)!r} is not valid TOML: {exc}") from None
        unknown = sorted(set(config) - set(OutlierPolicy.field_names()))
        if unknown:
            raise InputError(
                f"config file has unknown keys {unknown}; "
                f"valid keys: {', '.join(OutlierPolicy.field_names())}"
            )
        values.update(config)
    for name in OutlierPolicy.field_names():
        v = getattr(args, name, None)
        if v is not None:
            values[name] = v
    for name, flag in (("k", "--k"), ("r_max_m", "--r-max")):
        if name not in values:
            raise InputError(f"{flag} is required (or set {name} in the --config file)")
    return OutlierPolicy(**values)


def _read_input(args: argparse.Namespace) -> Any:
    from geokanon.io import check_r_max, read_points

    table = read_points(
        args.input, x=args.x, y=args.y, lon=args.lon, lat=args.lat, subject=args.subject,
        time=args.time, unit=args.unit, crs=args.crs, units=args.units, unit_id=args.unit_id,
        unit_grid_m=args.unit_grid, timezone=args.timezone, coord_scale=args.coord_scale,
        working_crs=args.working_crs, output_crs=args.output_crs,
    )  # fmt: skip
    r_max = getattr(args, "r_max_m", None)
    if isinstance(r_max, int | float) and not isinstance(r_max, bool):
        check_r_max(table, float(r_max))
    return table


def _pct(share: float) -> str:
    return f"{100 * share:.2f} %"


def _print_classification(result: Any, out: Any) -> None:
    d = result.to_dict()
    pol = result.policy
    print(
        f"{d['records']:,} records, {d['subjects']:,} subjects; k={pol.k}, r_max={pol.r_max_m:g} m",
        file=out,
    )
    print("label        records    share", file=out)
    for label, n in d["counts"].items():
        print(f"{label:<11}{n:>9,}  {_pct(n / d['records']):>8}", file=out)
    print(
        f"suppressed share {_pct(d['suppressed_share'])} (cap {_pct(pol.tau)}): "
        f"{'passes' if d['passes_global_cap'] else 'BREACHED'}",
        file=out,
    )
    rows = d["per_unit"]
    over = set(d["units_over_cap"])
    print(
        f"per unit (worst first; cap {_pct(pol.unit_cap)}): "
        f"{'passes' if d['passes_unit_cap'] else f'BREACHED in {len(over)} units'}",
        file=out,
    )
    print(f"  {'unit':<20}{'records':>9}{'subjects':>10}{'suppressed':>12}{'share':>10}", file=out)
    shown = rows[: max(10, len(over))]
    for r in shown:
        flag = "  over cap" if r["unit"] in over else ""
        print(
            f"  {r['unit'][:20]:<20}{r['records']:>9,}{r['subjects']:>10,}"
            f"{r['suppressed_subjects']:>12,}{_pct(r['share']):>10}{flag}",
            file=out,
        )
    if len(rows) > len(shown):
        print(f"  ... {len(rows) - len(shown)} more units with a smaller share", file=out)
    if d["many_disposals"]:
        print(
            f"warning: {_pct(d['disposal_share'])} of records need a disposal: the parameters, "
            "not the points, look like the problem",
            file=out,
        )


def cmd_classify(args: argparse.Namespace) -> int:
    from geokanon.pipeline import classify_points

    policy = _policy_from_args(args)
    table = _read_input(args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = classify_points(table, policy)
    if args.json:
        print(json.dumps(result.to_dict(), indent=None, allow_nan=False))
    else:
        _print_classification(result, sys.stdout)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from geokanon.demo import DEMO_CRS, DEMO_K, DEMO_R_MAX_M, demo_frame
    from geokanon.io import table_from_frame
    from geokanon.pipeline import classify_points

    frame = demo_frame()
    table = table_from_frame(frame, subject="patient_id", unit="district", crs=DEMO_CRS)
    policy = OutlierPolicy(k=DEMO_K, r_max_m=DEMO_R_MAX_M)
    print(
        "geokanon demo: a synthetic health service (a city, market towns and thin rural\n"
        "districts; no real people), classified as the design note's worked example.\n"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = classify_points(table, policy)
    _print_classification(result, sys.stdout)
    d = result.to_dict()
    worst = d["per_unit"][0]
    print(
        f"\nThe story: globally {_pct(d['suppressed_share'])} of patients would be suppressed, "
        f"but {worst['unit']} would lose {_pct(worst['share'])} of its {worst['subjects']:,} "
        "patients.\nThe global figure is the one that hides the problem: always read the "
        "per-unit table."
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``geokanon`` (exposed for documentation and tests)."""
    parser = argparse.ArgumentParser(
        prog="geokanon",
        description="Spatially k-anonymous releases of sensitive point records, "
        "with honest handling of outliers.",
        epilog="exit codes: 0 done; 2 bad input or parameters; 3 release refused; "
        "4 verification failed",
    )
    parser.add_argument("--version", action="version", version=f"geokanon {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    fmt = argparse.RawDescriptionHelpFormatter

    p = sub.add_parser(
        "classify",
        parents=[_input_options(), _policy_options()],
        help="label counts, suppressed share and the per-unit table",
        epilog=EXAMPLES["classify"],
        formatter_class=fmt,
    )
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(func=cmd_classify)

    p = sub.add_parser(
        "demo", help="run the bundled synthetic example", epilog=EXAMPLES["demo"],
        formatter_class=fmt,
    )  # fmt: skip
    p.add_argument("--out", type=Path, help="directory for the outputs")
    p.set_defaults(func=cmd_demo)

    # -- release / verify commands (lead) --
    # -- sweep command (sweep helper) --
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``geokanon`` and ``python -m geokanon``; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            warnings.showwarning = _show_warning
            return int(args.func(args))
    except GeokanonError as exc:
        print(f"geokanon: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("geokanon: interrupted; nothing was written", file=sys.stderr)
        return 130


def _show_warning(message: Any, category: Any, *_: Any, **__: Any) -> None:
    print(f"geokanon: warning: {message}", file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
