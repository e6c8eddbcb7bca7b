"""The ``geokanon`` command line: a thin layer over the library.

Exit codes: 0 done; 2 bad input or parameters; 3 release refused; 4 verification failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tomllib
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from geokanon import __version__
from geokanon._progress import within
from geokanon.errors import (
    GeokanonError,
    InputError,
    PrivacyRiskWarning,
    ReleaseRefused,
    VerificationFailed,
)
from geokanon.policy import OutlierPolicy

EXAMPLES = {
    "classify": (
        "examples:\n"
        "  geokanon classify dwellings.csv --k 5 --r-max 100 --unit gm_code --crs EPSG:28992\n"
        "  geokanon classify visits.parquet --k 5 --r-max 250 --subject user_id --json\n"
    ),
    "demo": "example:\n  geokanon demo\n",
    "release": (
        "examples:\n"
        "  geokanon release dwellings.csv --k 5 --r-max 300 --unit gm_code --crs EPSG:28992 \\\n"
        "      --keep consumption,unemployed --out out/dwellings\n"
        "  geokanon verify out/dwellings --source dwellings.csv\n"
    ),
    "verify": "example:\n  geokanon verify out/dwellings --source dwellings.csv\n",
}


_OF_RELEASE = "the release's own by default; a value given must agree with it"


def _policy_options(of_release: bool = False) -> argparse.ArgumentParser:
    """Options shared by every command that takes a policy (defined once).

    ``of_release``: for ``verify``/``risk``, where the policy is the release's.
    """
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group(f"policy ({_OF_RELEASE})" if of_release else "policy")
    needed = "" if of_release else " (required, or set in --config)"
    g.add_argument("--config", type=Path, help="TOML file with policy keys (k, r_max_m, tau, ...)")
    g.add_argument(
        "--k", type=int, help=f"distinct subjects every published class must hold (>= 2){needed}"
    )
    g.add_argument(
        "--r-max", dest="r_max_m", type=float, help=f"largest tolerated displacement, m{needed}"
    )
    g.add_argument("--merge-ratio", type=float, help="iota threshold merge/generalise (2)")
    g.add_argument("--generalise-ratio", type=float, help="iota threshold generalise/suppress (4)")
    g.add_argument("--tau", type=float, help="global cap on the suppressed share (0.01)")
    g.add_argument("--unit-cap", type=float, help="per-unit cap on the suppressed share (0.10)")
    g.add_argument("--t-max", dest="t_max_s", type=float, help="tolerated time gap, seconds")
    g.add_argument(
        "--time-mode", choices=["absolute", "time_of_day"], help="absolute time or 24 h clock"
    )
    g.add_argument("--seed", type=int, help="seed of tie-breaking choices (0); never keys a mask")
    return p


def _path_or_url(text: str) -> Path | str:
    """A command-line path, or a ``postgresql://`` URL kept as text (Path would mangle it)."""
    from geokanon.io.postgis import is_database_url

    return text if is_database_url(text) else Path(text)


def _is_dir(value: Any) -> bool:
    return isinstance(value, Path) and value.is_dir()


def _input_options(positional: bool = True) -> argparse.ArgumentParser:
    """How the records are read (defined once); ``verify``/``risk`` take them without INPUT."""
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("input" if positional else f"input ({_OF_RELEASE})")
    if positional:
        g.add_argument(
            "input",
            type=_path_or_url,
            help="records: CSV (.csv.gz too), Parquet/GeoParquet, GeoPackage, GeoJSON, "
            "Shapefile, or postgresql://[user@]host[:port]/db with --table or --query",
        )
    g.add_argument(
        "--table", metavar="SCHEMA.TABLE", help="with a postgresql:// INPUT: the table of records"
    )
    g.add_argument(
        "--query", metavar="SELECT", help="with a postgresql:// INPUT: a SELECT of the records"
    )
    g.add_argument("--x", help="x column in the CRS's units (default x)")
    g.add_argument("--y", help="y column in the CRS's units (default y)")
    g.add_argument("--lon", help="longitude column, degrees (default lon when there is no x)")
    g.add_argument("--lat", help="latitude column, degrees (default lat when there is no y)")
    g.add_argument("--crs", help="CRS of the coordinates if the file names none, e.g. EPSG:28992")
    g.add_argument(
        "--coord-scale", type=float, metavar="F", help="multiply x/y by this for the CRS's units"
    )
    g.add_argument(
        "--working-crs",
        metavar="CRS",
        help="metric CRS for distances (default: chosen for lon/lat)",
    )
    g.add_argument(
        "--output-crs", metavar="CRS", help="CRS of published coordinates (default: the input's)"
    )
    g.add_argument("--subject", help="subject id column (default: each record its own subject)")
    g.add_argument("--time", help="time column (ISO 8601 or epoch seconds)")
    g.add_argument(
        "--timezone", metavar="TZ", help="IANA time zone of times without an offset, e.g. UTC"
    )
    g.add_argument("--unit", help="administrative unit column")
    g.add_argument(
        "--units", type=Path, metavar="FILE", help="unit polygon file (GeoPackage, GeoJSON, ...)"
    )
    g.add_argument("--unit-id", metavar="COL", help="unit id column of the --units file")
    g.add_argument("--unit-grid", type=float, metavar="M", help="square grid cells of M metres")
    g.add_argument(
        "--study-area", type=Path, metavar="FILE", help="polygon file; records outside are refused"
    )
    g.add_argument(
        "--drop-duplicates",
        action="store_true",
        default=None,
        help="remove records identical to an earlier one in every column (exact copies) first",
    )
    g.add_argument(
        "--clip",
        action="store_true",
        default=None,
        help="with --study-area: drop the records outside it and count them instead of refusing",
    )
    g.add_argument(
        "--exclude-units",
        metavar="A,B",
        help="unit ids whose records are left out (dropped, counted and named in the release)",
    )
    g.add_argument(
        "--merge-small-units",
        type=int,
        metavar="N",
        help="a unit with fewer than N subjects joins its neighbour (polygon adjacency with "
        "--units, else the nearest unit); merges are listed in the release",
    )
    return p


def _backend_options() -> argparse.ArgumentParser:
    """``--backend``/``--scheduler`` (classify and release): run the stages on Dask tiles."""
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("backend (see docs/dask.md)")
    g.add_argument(
        "--backend",
        choices=["local", "dask"],
        default="local",
        help="local: one process (default); dask: tiles with exact halos on a Dask cluster",
    )
    g.add_argument(
        "--scheduler", metavar="ADDRESS", help="Dask scheduler address (default: a local cluster)"
    )
    g.add_argument("--workers", type=int, help="workers of the local Dask cluster (one per core)")
    g.add_argument(
        "--tile", dest="tile_m", type=float, metavar="M", help="tile side, m (8 x the halo)"
    )
    return p


def _dask_tiling(args: argparse.Namespace, policy: OutlierPolicy) -> Any:
    from geokanon.distributed import Tiling

    return Tiling.for_policy(policy, tile_m=args.tile_m)


def _classify_dask(args: argparse.Namespace, policy: OutlierPolicy) -> Any:
    """``classify --backend dask``: a directory of Parquet files is never read whole."""
    from geokanon.distributed import (
        ParquetPartitions,
        classify_partitions,
        classify_points_distributed,
    )

    tiling = _dask_tiling(args, policy)
    if _is_dir(args.input):
        if args.lon or args.lat:
            raise InputError(
                "a directory input needs projected x/y columns in metres; project lon/lat first"
            )
        if args.drop_duplicates:
            raise InputError(
                "--drop-duplicates is not available for a directory of partitions yet; remove "
                "the exact copies first (or classify one file)"
            )
        _whole_file_only(args)
        source = ParquetPartitions.from_path(
            args.input, x=args.x, y=args.y, subject=args.subject, time=args.time, unit=args.unit
        )
        return classify_partitions(
            source, policy, tiling=tiling, scheduler=args.scheduler, n_workers=args.workers
        )
    table = _read_input(args)
    return classify_points_distributed(
        table, policy, tiling=tiling, scheduler=args.scheduler, n_workers=args.workers
    )


def _whole_file_only(args: argparse.Namespace) -> None:
    """Refuse the input options a directory of partitions does not support yet."""
    given = [
        flag
        for flag, name in (
            ("--clip", "clip"),
            ("--exclude-units", "exclude_units"),
            ("--merge-small-units", "merge_small_units"),
            ("--study-area", "study_area"),
        )
        if getattr(args, name, None)
    ]
    if given:
        raise InputError(
            f"{', '.join(given)} not available for a directory of partitions yet; give one "
            "file, or filter the partitions first"
        )


def _policy_from_args(args: argparse.Namespace) -> OutlierPolicy:
    values = _policy_values(args)
    for name, flag in (("k", "--k"), ("r_max_m", "--r-max")):
        if name not in values:
            raise InputError(f"{flag} is required (or set {name} in the --config file)")
    if getattr(args, "time", None) is not None and values.get("t_max_s") is None:
        # A time column is judged only against a tolerated gap; without one it would be
        # read, binned and published while no label looked at it.
        raise InputError(
            f"--time {args.time!r} needs --t-max SECONDS (or t_max_s in the --config file): "
            "the largest time gap the release tolerates, judged together with r_max "
            "(e.g. --t-max 3600); or drop --time"
        )
    return OutlierPolicy(**values)


def _policy_values(args: argparse.Namespace) -> dict[str, Any]:
    """The policy keys given: the ``--config`` file's, then the options' (which win)."""
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
    return values


def _read_input(args: argparse.Namespace) -> Any:
    from geokanon.io import check_r_max, read_points

    table = read_points(
        args.input, x=args.x, y=args.y, lon=args.lon, lat=args.lat, subject=args.subject,
        time=args.time, unit=args.unit, crs=args.crs, units=args.units, unit_id=args.unit_id,
        unit_grid_m=args.unit_grid, timezone=args.timezone, coord_scale=args.coord_scale,
        working_crs=args.working_crs, output_crs=args.output_crs, study_area=args.study_area,
        drop_duplicates=bool(getattr(args, "drop_duplicates", None)),
        clip=bool(getattr(args, "clip", None)), exclude_units=getattr(args, "exclude_units", None),
        merge_small_units=getattr(args, "merge_small_units", None),
        progress=within(_progress(args), "read"), table=args.table, query=args.query,
    )  # fmt: skip
    r_max = getattr(args, "r_max_m", None)
    if isinstance(r_max, int | float) and not isinstance(r_max, bool):
        check_r_max(table, float(r_max))
    return table


def _progress(args: argparse.Namespace) -> Any:
    """The command's progress display (``geokanon._display``), or None with ``--quiet``."""
    display = getattr(args, "display", None)
    if display is None or getattr(args, "quiet", False):
        return None
    return display


def _end_progress(args: argparse.Namespace) -> None:
    """Close the progress display (its last stage) before a command prints its results."""
    display = getattr(args, "display", None)
    if display is not None:
        display.close()


def _say(args: argparse.Namespace, text: str) -> None:
    """A message line on stderr, printed where it cannot land inside a progress line."""
    display = getattr(args, "display", None)
    if display is not None:
        display.message(text)
    else:
        print(text, file=sys.stderr)


def _pct(share: float) -> str:
    return f"{100 * share:.2f} %"


def _print_classification(result: Any, out: Any) -> None:
    d = result.to_dict()
    pol = result.policy
    print(
        f"{d['records']:,} records, {d['subjects']:,} subjects; k={pol.k}, r_max={pol.r_max_m:g} m",
        file=out,
    )
    merged = d.get("subject_ids_merged", 0)
    if merged:
        print(
            f"{merged:,} subject ids merged into another (they differ from it only by case, "
            "surrounding space or Unicode form: one subject)",
            file=out,
        )
    by_time = d.get("because_of_time")
    if by_time is None:
        print("label        records    share", file=out)
        for label, n in d["counts"].items():
            print(f"{label:<11}{n:>9,}  {_pct(n / d['records']):>8}", file=out)
    else:
        # With times: how many records of each label have it only because of time.
        print(f"label        records    share  by time (t_max={pol.t_max_s:g} s)", file=out)
        for label, n in d["counts"].items():
            print(
                f"{label:<11}{n:>9,}  {_pct(n / d['records']):>8}  {by_time[label]:>8,}", file=out
            )
        print(
            f"by time: records whose label is worse than space alone gives "
            f"({sum(by_time.values()):,} in all)",
            file=out,
        )
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
    if args.backend == "dask":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = _classify_dask(args, policy)
    else:
        table = _read_input(args)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = classify_points(table, policy, progress=_progress(args))
    _end_progress(args)  # the bars end above the results
    if args.json:
        print(json.dumps(result.to_dict(), indent=None, allow_nan=False))
    else:
        _print_classification(result, sys.stdout)
    return 0


#: What a refused release adds when ``no_leak`` failed on coordinates carried to the
#: output CRS (the release's own check has no file values to compare exactly then).
NEAR_LEAK_HINT = (
    "the release publishes in a CRS other than the input's (--output-crs), so no_leak "
    "compares the published pairs with the records' coordinates carried there within the "
    "transformation's own round-off (4 times its largest round trip over the records; "
    "millimetres where the CRSs differ by a datum shift without grids): a representative "
    "that close to a record fails it as one. If that is what happened, publish in the "
    "input's own CRS (drop --output-crs) and transform the release afterwards: pairs are "
    "then compared exactly"
)


def _carried(table: Any, options: Any) -> bool:
    """Whether the release's own ``no_leak`` matches published pairs within a tolerance:
    it publishes in a CRS other than its working one and does not have the input's own
    values in it (lon/lat input published as lon/lat keeps them: compared exactly)."""
    from geokanon.release import published_crs

    published = published_crs(table, options)
    if not table.working_crs or table.working_crs == published:
        return False
    return table.input_xy is None or table.crs != published


def _read_options(args: argparse.Namespace) -> tuple[tuple[str, Any], ...]:
    """The input options of a release (``read_points`` keywords), recorded for ``verify``."""
    names = {"x": "x", "y": "y", "lon": "lon", "lat": "lat", "subject": "subject",
             "time": "time", "unit": "unit", "crs": "crs", "units": "units",
             "unit_id": "unit_id", "unit_grid": "unit_grid_m", "timezone": "timezone",
             "coord_scale": "coord_scale", "working_crs": "working_crs",
             "output_crs": "output_crs", "study_area": "study_area",
             "drop_duplicates": "drop_duplicates", "clip": "clip",
             "merge_small_units": "merge_small_units", "table": "table",
             "query": "query"}  # fmt: skip
    out = []
    for arg, kw in names.items():
        v = getattr(args, arg, None)
        if v is not None:
            out.append((kw, str(v.resolve()) if isinstance(v, Path) else v))
    if getattr(args, "exclude_units", None):
        ids = [u.strip() for u in args.exclude_units.split(",") if u.strip()]
        out.append(("exclude_units", ids))
    return tuple(out)


def _release_mask(args: argparse.Namespace) -> Any:
    """The geomask of ``release`` from --mask/--mask-sd/--mask-min/--mask-max, or None."""
    from geokanon.mask import MaskSpec

    if args.mask is None:
        if args.mask_sd is not None or args.mask_min is not None or args.mask_max is not None:
            raise InputError("--mask-sd/--mask-min/--mask-max need --mask jitter or --mask donut")
        return None
    if args.mask == "jitter":
        if args.mask_sd is None:
            raise InputError("--mask jitter needs --mask-sd (metres)")
        return MaskSpec.jitter(sd_m=args.mask_sd, max_m=args.mask_max)
    if args.mask_max is None:
        raise InputError("--mask donut needs --mask-max (and optionally --mask-min), in metres")
    return MaskSpec.donut(min_m=args.mask_min or 0.0, max_m=args.mask_max)


def _mask_key(args: argparse.Namespace, masked: bool) -> Any:
    """The key file of ``--mask-key`` as a :class:`~geokanon.mask.MaskKey`, or None."""
    if args.mask_key is None:
        return None
    if not masked:
        raise InputError("--mask-key needs a mask (--mask jitter or --mask donut)")
    from geokanon.mask import MaskKey

    return MaskKey.from_file(args.mask_key)


def _kept_columns(given: list[str], columns: Iterable[Any] = ()) -> tuple[str, ...]:
    """The ``--keep`` columns, from every ``--keep`` (each comma-separated), in order;
    a column named twice is published once. A value that is exactly the name of one of
    ``columns`` is that column, commas and spaces included."""
    exact = {str(c) for c in columns}
    names = (
        c
        for value in given
        for c in ([value] if value in exact else (p.strip() for p in value.split(",")))
    )
    return tuple(dict.fromkeys(c for c in names if c))


def cmd_release(args: argparse.Namespace) -> int:
    from geokanon.pipeline import release_points
    from geokanon.release import ReleaseOptions, check_keep

    policy = _policy_from_args(args)
    mask = _release_mask(args)
    options = ReleaseOptions(
        keep=_kept_columns(args.keep),
        totals=args.totals,
        force=args.force,
        output_crs=args.output_crs,
        read_options=_read_options(args),
        mask=mask,
        mask_key=_mask_key(args, mask is not None),
        local_metres=args.local_metres,
        gpkg_records=args.gpkg_records,
        gpkg_groups=args.gpkg_groups,
        database=_database_target(args),
    )
    if _is_dir(args.input):
        if options.database is not None:
            raise InputError(
                "a directory of partitions cannot be released to a database yet: give --out DIR"
            )
        return _release_partitions(args, policy, options)
    table = _read_input(args)
    options = dataclasses.replace(options, keep=_kept_columns(args.keep, table.attributes.columns))
    if args.dry_run or args.backend == "dask":  # else release_points checks, before any work
        check_keep(options.keep, table)
    if args.dry_run:
        from geokanon.pipeline import Plan

        plan = Plan.from_policy(
            policy, source=_shown_input(args), read_options=options.read_options,
            release=options, out=_shown(args.out),
        )  # fmt: skip
        print(plan.describe(table))
        return 0
    progress = _progress(args)

    def suggest(exc: ReleaseRefused, core_table: Any) -> None:  # message and refusal report
        if progress is not None:
            progress("refused: trying single changes")
        _suggest_command(args, core_table, policy, exc)

    out = args.out if options.database is None else args.audit
    try:
        if args.backend == "dask":
            if options.database is not None:
                raise InputError(
                    "--backend dask cannot release to a database yet: drop --backend or give "
                    "--out DIR"
                )
            from geokanon.distributed import release_distributed

            result = release_distributed(
                table, policy, args.out, options, tiling=_dask_tiling(args, policy),
                scheduler=args.scheduler, n_workers=args.workers, progress=progress,
                on_refusal=suggest,
            )  # fmt: skip
        else:
            result = release_points(
                table, policy, out, options, progress=progress, on_refusal=suggest
            )
    except ReleaseRefused as exc:
        for note in getattr(exc, "__notes__", []):  # where the refusal report went
            _say(args, f"geokanon: {note}")
        raise
    except VerificationFailed as exc:
        if exc.results.get("no_leak") is False and _carried(table, options):
            raise VerificationFailed(f"{exc}; {NEAR_LEAK_HINT}", exc.results) from None
        if exc.results.get("holes") is False and policy.allow_synthetic:
            from geokanon.release import SYNTHESIS_PUBLIC

            hint = f"with --allow-synthetic {SYNTHESIS_PUBLIC}"
            raise VerificationFailed(f"{exc}; {hint}", exc.results) from None
        raise
    _end_progress(args)  # the bars end above the results
    m = result.manifest
    c = result.counts
    where = f"{out}/release" if options.database is None else options.database.name
    print(
        f"release written to {where} ({m['records_published']:,} records: "
        f"{c['grouped'] + c['merged']:,} in {m['groups']:,} groups, {c['generalised']:,} "
        f"generalised; {c['suppressed']:,} suppressed, published as "
        f"{m['counts']['suppressed']!s}"
        + (
            f"; {len(result.core.synthetic):,} synthetic stand-ins, published as "
            f"{m['counts']['synthetic']!s}"
            if m["synthetic"].get("allowed")
            else ""
        )
        + f"); audit (custodian only) in {out}/audit"
    )
    print("verification: " + ", ".join(f"{k} {'ok' if v else 'FAILED'}" for k, v in
                                       m["verification"].items()))  # fmt: skip
    _print_report_path(out)
    return 0


def _shown(value: Any) -> str:
    """A path, or a database URL without its credentials, for messages."""
    from geokanon.io.postgis import DatabaseInput, is_database_url, redact

    if isinstance(value, DatabaseInput):
        return value.name
    return redact(str(value)) if is_database_url(value) else str(value)


def _shown_input(args: argparse.Namespace) -> str:
    """The INPUT for messages: a path, or the table/query in the redacted URL."""
    from geokanon.io.postgis import DatabaseInput, is_database_url

    if is_database_url(args.input) and (args.table is None) != (args.query is None):
        return DatabaseInput(args.input, table=args.table, query=args.query).name
    return _shown(args.input)


def _database_target(args: argparse.Namespace) -> Any:
    """``--out postgresql://... --out-schema NAME --audit DIR``: the target, checked now.

    Before any work the database must be reachable, have PostGIS and take the schema
    (an existing one only with --force): a refused run writes nothing anywhere.
    """
    from geokanon.io.postgis import DatabaseTarget, check_target, is_database_url

    if not is_database_url(args.out):
        for flag, v in (("--out-schema", args.out_schema), ("--audit", args.audit)):
            if v is not None:
                raise InputError(f"{flag} goes with --out postgresql://...; drop it")
        return None
    if args.out_schema is None:
        raise InputError("--out postgresql://... needs --out-schema NAME: the schema to write")
    if args.audit is None:
        raise InputError(
            "--out postgresql://... needs --audit DIR: the audit never goes to the database; "
            "DIR keeps it (DIR/audit) with the release files as loaded (DIR/release)"
        )
    target = DatabaseTarget(args.out, args.out_schema, force=bool(args.force))
    check_target(target)
    return target


def _with_option(argv: list[str], option: str, value: str | None) -> list[str]:
    """``argv`` with ``option`` set to ``value`` (replaced where given, else appended)."""
    out = list(argv)
    for i, tok in enumerate(out):
        if value is not None and tok == option and i + 1 < len(out):
            out[i + 1] = value
            return out
        if value is not None and tok.startswith(option + "="):
            out[i] = f"{option}={value}"
            return out
        if value is None and tok == option:
            return out
    return [*out, option] if value is None else [*out, option, value]


def _suggest_command(
    args: argparse.Namespace, table: Any, policy: OutlierPolicy, exc: ReleaseRefused
) -> None:
    """Add to a cap refusal the smallest change whose first pass passes, as a command line.

    The changes are classified, not released (:func:`geokanon.pipeline.what_would_pass`):
    k-1, 1.5 x r_max, merging small units, membership-sensitive mode. The command is the
    user's own (``args.argv``) with the one option changed.
    """
    import shlex

    from geokanon.errors import Unsatisfiable
    from geokanon.pipeline import what_would_pass

    argv = getattr(args, "argv", None)
    if isinstance(exc, Unsatisfiable) or argv is None:
        return
    adjacency = None
    if args.units is not None and args.unit_id is not None:
        from geokanon.io.units import unit_adjacency

        adjacency = unit_adjacency(args.units, args.unit_id)
    trials = what_would_pass(table, policy, adjacency=adjacency)
    tried = "; ".join(
        f"{t.change}: {t.suppressed_share:.2%} suppressed, {t.units_over_cap} "
        f"unit{'' if t.units_over_cap == 1 else 's'} over the cap"
        for t in trials
        if not t.passes
    )
    passing = [t for t in trials if t.passes]
    exc.figures["suggestion"] = [dataclasses.asdict(t) for t in trials]
    if passing:
        t = passing[0]
        command = shlex.join(["geokanon", *_with_option(argv, t.option, t.value)])
        text = (
            f". Smallest change whose first pass breaches no cap ({t.change}: "
            f"{t.suppressed_share:.2%} suppressed"
            + (f"; tried first: {tried}" if tried else "")
            + f"); run:\n  {command}"
        )
    else:
        text = f". No single change tried passes the caps in its first pass ({tried})."
    exc.args = (str(exc) + text, *exc.args[1:])


def _print_report_path(out: Path) -> None:
    """The last line of a release: where the report is (read it before publishing)."""
    report = out / "release" / "report.html"
    if report.exists():
        print(f"report: {report} (open it in a browser before publishing)")


def _release_partitions(args: argparse.Namespace, policy: OutlierPolicy, options: Any) -> int:
    """``release DIR_OF_PARQUET --backend dask``: the partitioned release (docs/dask.md)."""
    if args.backend != "dask":
        raise InputError(
            "a directory of Parquet partitions is released with --backend dask "
            "(or concatenate the files and release one file)"
        )
    if args.lon or args.lat:
        raise InputError(
            "a directory input needs projected x/y columns in metres; project lon/lat first"
        )
    if args.dry_run:
        raise InputError("--dry-run reads the whole input; it is not available for a directory")
    if args.drop_duplicates:
        raise InputError(
            "--drop-duplicates is not available for a directory of partitions yet; remove the "
            "exact copies first (or release one file)"
        )
    _whole_file_only(args)
    from geokanon.distributed import ParquetPartitions, release_partitions

    source = ParquetPartitions.from_path(
        args.input, x=args.x, y=args.y, subject=args.subject, time=args.time, unit=args.unit
    )
    if len(source):  # a --keep value that is exactly a column's name (the first partition's)
        keep = _kept_columns(args.keep, source.other_columns(0))
        options = dataclasses.replace(options, keep=keep)
    progress = _progress(args)
    try:
        result = release_partitions(
            source, policy, args.out, options, tiling=_dask_tiling(args, policy),
            scheduler=args.scheduler, n_workers=args.workers, crs=args.crs, progress=progress,
        )  # fmt: skip
    except ReleaseRefused as exc:
        for note in getattr(exc, "__notes__", []):
            _say(args, f"geokanon: {note}")
        raise
    _end_progress(args)  # the bars end above the results
    m = result.manifest
    c = result.counts
    print(
        f"release written to {args.out}/release in {m['record_parts']} parts "
        f"({m['records_published']:,} records: {c['grouped'] + c['merged']:,} in "
        f"{m['groups']:,} groups, {c['generalised']:,} generalised; {c['suppressed']:,} "
        f"suppressed, published as {m['counts']['suppressed']!s}); audit (custodian only) in "
        f"{args.out}/audit"
    )
    print("verification: " + ", ".join(f"{k} {'ok' if v else 'FAILED'}" for k, v in
                                       m["verification"].items()))  # fmt: skip
    _print_report_path(args.out)
    return 0


def _verify_partitioned(args: argparse.Namespace, audit: dict[str, Any]) -> int:
    """``verify DIR --source DIR_OF_PARQUET``: the partitioned verifier on a Dask cluster."""
    from geokanon.distributed import ParquetPartitions, dask_client
    from geokanon.verify import format_report
    from geokanon.verify.partitioned import verify_partitioned

    opts = audit.get("read_options", {})
    roles = {r: opts.get(r) for r in ("x", "y", "subject", "time", "unit") if opts.get(r)}
    source = ParquetPartitions.from_path(args.source, **roles)
    with dask_client(None, scheduler=args.scheduler, n_workers=args.workers) as client:
        report = verify_partitioned(args.dir, source=source, client=client)
    _end_progress(args)  # the bars end above the results
    print(format_report(report))
    return 0 if report.passed else 4


def cmd_describe(args: argparse.Namespace) -> int:
    from geokanon.pipeline import Plan

    policy = _policy_from_args(args)
    table = _read_input(args)
    plan = Plan.from_policy(policy, source=_shown_input(args), read_options=_read_options(args))
    print(plan.describe(table))
    return 0


_OPTION_FLAGS = {"unit_grid_m": "--unit-grid", "r_max_m": "--r-max", "t_max_s": "--t-max"}


def _flag(name: str) -> str:
    return _OPTION_FLAGS.get(name, "--" + name.replace("_", "-"))


def _same_value(name: str, given: Any, was: Any) -> bool:
    """Whether an option given to ``verify``/``risk`` agrees with the release's record."""
    if given == was:
        return True
    if isinstance(given, bool) or isinstance(was, bool):
        return False
    if isinstance(given, int | float) and isinstance(was, int | float):
        return float(given) == float(was)
    if name.endswith("crs"):
        import pyproj

        try:
            return bool(pyproj.CRS.from_user_input(given) == pyproj.CRS.from_user_input(was))
        except pyproj.exceptions.CRSError:
            return False
    if name in ("units", "study_area"):
        return Path(str(given)).resolve() == Path(str(was)).resolve()
    return str(given) == str(was)


def _options_of_release(args: argparse.Namespace, audit_doc: dict[str, Any]) -> dict[str, Any]:
    """The read options of the release in ``args.dir``, once the given ones agree with it.

    ``verify`` and ``risk`` take the input and policy options ``release`` took. An
    option given must agree with what the release recorded (``audit/audit.json``'s
    ``read_options``, the manifest's ``policy``), else :class:`InputError` (exit 2)
    naming both values; an option left out is the release's.
    """
    recorded: dict[str, Any] = dict(audit_doc.get("read_options") or {})
    for name, given in _read_options(args):
        flag = _flag(name)
        was = recorded.get(name)
        shown = flag if given is True else f"{flag} {given}"  # a switch (--drop-duplicates)
        if was is None or was is False:
            raise InputError(
                f"{shown} given, the release was made without {flag}: drop {flag} "
                "(verify and risk read the source as the release did)"
            )
        if not _same_value(name, given, was):
            raise InputError(
                f"{shown} given, the release was made with {flag} {was}: drop {flag} "
                "or give the release's value"
            )
    given_policy = _policy_values(args)
    if given_policy:
        try:
            manifest = json.loads((args.dir / "release" / "manifest.json").read_text())
            policy = manifest["policy"]
        except (OSError, ValueError, KeyError, TypeError):
            raise InputError(
                f"{', '.join(map(_flag, given_policy))} given, but the release's "
                "manifest.json cannot be read to compare them: drop them"
            ) from None
        for name, given in given_policy.items():
            was = policy.get(name)
            flag = _flag(name) if getattr(args, name, None) is not None else f"{name} in --config"
            shown = str(given.value) if hasattr(given, "value") else given
            if was is None:
                raise InputError(
                    f"{flag} {shown} given, the release was made without {name}: drop {flag}"
                )
            if not _same_value(name, shown, was):
                raise InputError(
                    f"{flag} {shown} given, the release was made with {name}={was}: drop "
                    f"{flag} (it is read from the release) or give {was}"
                )
    return recorded


def _source_input(args: argparse.Namespace, opts: dict[str, Any]) -> Any:
    """``--source``: a path, or a database input with the release's --table/--query."""
    from geokanon.io.postgis import DatabaseInput, is_database_url

    if is_database_url(args.source):
        return DatabaseInput(args.source, table=opts.get("table"), query=opts.get("query"))
    return args.source


def cmd_verify(args: argparse.Namespace) -> int:
    from geokanon.io.postgis import is_database_url

    if is_database_url(args.dir):
        return _verify_database(args)
    if args.out_schema is not None or args.audit is not None:
        raise InputError("--out-schema and --audit go with a postgresql:// release: drop them")
    return _verify_dir(args, args.dir)


def _verify_database(args: argparse.Namespace) -> int:
    """``verify postgresql://... --out-schema NAME --audit DIR --source INPUT``.

    The release files the schema holds (``release_files``) are written into a private
    temporary directory (0700) beside a link to DIR's audit, verified there as any
    release, and the schema's tables are compared with those files row for row.
    """
    import tempfile

    from geokanon.io.postgis import compare_tables, export_release, redact

    if args.out_schema is None or args.audit is None:
        raise InputError(
            "verify postgresql://... needs --out-schema NAME and --audit DIR (the release's "
            "audit directory, as release --audit wrote it)"
        )
    audit = Path(args.audit) / "audit"
    if not (audit / "audit.json").exists():
        raise InputError(f"{str(args.audit)!r} holds no geokanon audit (no audit/audit.json)")
    url = str(args.dir)
    with tempfile.TemporaryDirectory(prefix="geokanon-verify-") as tmp:
        root = Path(tmp)
        export_release(url, args.out_schema, root / "release")
        (root / "audit").symlink_to(audit.resolve(), target_is_directory=True)
        print(f"checking schema {args.out_schema} in {redact(url)} with the audit in {args.audit}")
        code = _verify_dir(args, root)
        problems = compare_tables(url, args.out_schema, root / "release")
    for line in problems:
        print(f"FAIL tables: {line}")
    if not problems:
        print("PASS tables: every table of the schema equals its verified release file")
    return code if not problems else 4


def _verify_dir(args: argparse.Namespace, directory: Path) -> int:
    from geokanon.io import read_points
    from geokanon.verify import format_report, verify_release

    args.dir = directory
    audit = args.dir / "audit" / "audit.json"
    if not audit.exists():
        raise InputError(f"{str(args.dir)!r} is not a geokanon release directory (no audit/)")
    audit_doc = json.loads(audit.read_text())
    opts = _options_of_release(args, audit_doc)
    if "partitioned" in audit_doc:
        return _verify_partitioned(args, audit_doc)
    if getattr(args, "backend", "local") == "dask":
        raise InputError(
            "verify --backend dask checks a partitioned release (written by release "
            "--backend dask from a directory); this release was written whole: drop --backend"
        )
    progress = _progress(args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        source = _source_input(args, opts)
        table = read_points(source, **opts, progress=within(progress, "read"))
    report = verify_release(
        args.dir, source=table, source_file=source, progress=within(progress, "verify"),
        before_report=False,
    )  # fmt: skip
    _end_progress(args)  # the bars end above the results
    print(format_report(report))
    return 0 if report.passed else 4


def cmd_demo(args: argparse.Namespace) -> int:
    from geokanon.demo import DEMO_CRS, DEMO_K, DEMO_R_MAX_M, demo_frame
    from geokanon.io import table_from_frame
    from geokanon.pipeline import classify_points, release_points
    from geokanon.release import ReleaseOptions

    out = args.out or Path("geokanon-demo")
    if out.exists() and not args.force:  # before any work: never replace a directory silently
        raise InputError(
            f"demo output directory {str(out)!r} already exists; pass --force to replace it, "
            "or choose another --out"
        )
    frame = demo_frame()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = table_from_frame(frame, subject="patient_id", unit="district", crs=DEMO_CRS)
    policy = OutlierPolicy(k=DEMO_K, r_max_m=DEMO_R_MAX_M)
    print(
        "geokanon demo: a synthetic health service (a city, market towns and thin rural\n"
        "districts; no real people), k=5, r_max=2000 m as in the design note's worked example.\n"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = classify_points(table, policy, progress=_progress(args))
    _print_classification(result, sys.stdout)
    d = result.to_dict()
    worst = d["per_unit"][0]
    print(
        f"\nThe story: globally {_pct(d['suppressed_share'])} of patients are labelled suppress, "
        f"but {worst['unit']} would lose {_pct(worst['share'])} of its {worst['subjects']:,} "
        "patients.\nThe global figure is the one that hides the problem: always read the "
        "per-unit table.\n"
    )
    options = ReleaseOptions(keep=("age", "deprivation"), force=args.force)
    released = release_points(table, policy, out, options, progress=_progress(args))
    _end_progress(args)
    m = released.manifest
    c = released.counts
    print(
        f"Released: {c['grouped'] + c['merged']:,} patients in {m['groups']:,} groups of >= "
        f"{policy.k}, {c['generalised']:,} generalised to their district or the area, "
        f"{c['suppressed']:,} suppressed (published as {m['counts']['suppressed']!s}); "
        f"{len(m['verification'])} independent checks passed."
    )
    print(f"  release (publishable): {out / 'release'}")
    print(f"  release notes:         {out / 'release' / 'RELEASE_NOTES.md'}")
    if (out / "release" / "report.html").exists():
        print(f"  report:                {out / 'release' / 'report.html'}")
    print(f"  audit (custodian):     {out / 'audit'}")
    print(
        "\nYour own data: name the coordinate, subject and unit columns and the CRS, e.g.\n"
        "  geokanon sweep records.csv --k 3,5,10 --r-max 250,500,1000 --subject patient_id "
        "--unit district --crs EPSG:3035\n"
        "  geokanon release records.csv --k 5 --r-max 500 --subject patient_id "
        "--unit district --crs EPSG:3035 --keep age --out my-release\n"
        "(lon/lat columns need no --crs; geokanon release --help lists every option)"
    )
    return 0


SWEEP_EXAMPLES = (
    "examples:\n"
    "  geokanon sweep points.csv --k 3,5,10 --r-max 100,250,500,1000 --unit tract_id \\\n"
    "      --crs EPSG:26978 --out sweep/\n"
    "  geokanon sweep points.csv --k 3,5 --r-max 250,500 --mask-sd 0,50,100 --seed 8731\n"
    "  geokanon sweep points.csv --k 5 --r-max 500 --mask donut --mask-min 20 \\\n"
    "      --mask-max 0,100 --mask-contain --mask-units tracts.gpkg --unit tract_id\n"
)


def _sweep_masks(args: argparse.Namespace) -> list[Any] | None:
    """Mask levels from ``--mask``/``--mask-sd``/``--mask-min``/``--mask-max`` (0 = no mask)."""
    from geokanon.mask import MaskSpec
    from geokanon.sweep import parse_list

    kind = args.mask or ("jitter" if args.mask_sd else "donut" if args.mask_max else None)
    if kind is None:
        if args.mask_contain:
            raise InputError("--mask-contain needs a mask (--mask-sd LIST or --mask donut)")
        return None
    if kind == "jitter":
        if not args.mask_sd:
            raise InputError("--mask jitter needs --mask-sd LIST (metres; 0 = no mask)")
        cut = None
        if args.mask_max:
            cuts = parse_list(args.mask_max, name="--mask-max")
            if len(cuts) != 1:
                raise InputError("for a jitter, --mask-max is one truncation distance, not a list")
            cut = cuts[0]
        levels = parse_list(args.mask_sd, name="--mask-sd")
        return [
            None if sd == 0 else MaskSpec.jitter(sd_m=sd, max_m=cut, contain=args.mask_contain)
            for sd in levels
        ]
    if args.mask_sd:
        raise InputError("--mask-sd applies to the jitter; a donut takes --mask-min/--mask-max")
    if not args.mask_max:
        raise InputError("--mask donut needs --mask-max LIST (metres; 0 = no mask)")
    lo = args.mask_min or 0.0
    return [
        None if hi == 0 else MaskSpec.donut(min_m=lo, max_m=hi, contain=args.mask_contain)
        for hi in parse_list(args.mask_max, name="--mask-max")
    ]


def _mask_subject_ids(args: argparse.Namespace, table: Any) -> Any:
    """The raw subject ids keying the mask noise (so adding subjects changes no one's noise).

    Read again from CSV or Parquet input; for other formats, or if the column cannot
    be matched to the table row for row, the dense subject codes are used (stable
    under row order, but they shift when subjects are added).
    """
    import pandas as pd

    path = args.input
    if not isinstance(path, Path):  # a database: the dense codes
        return table.subjects
    try:
        if path.suffix.lower() in (".parquet", ".pq"):
            raw = pd.read_parquet(path, columns=[args.subject])[args.subject].to_numpy()
        elif path.suffix.lower() in (".csv", ".txt"):
            raw = pd.read_csv(path, usecols=[args.subject], low_memory=False)[args.subject]
            raw = raw.to_numpy()
        else:
            return table.subjects
    except (OSError, ValueError, KeyError):
        return table.subjects
    return raw if raw.shape == (len(table),) else table.subjects


def _mask_polygons(args: argparse.Namespace, table: Any) -> list[Any] | None:
    """Unit polygons in the order of the table's unit codes, for ``--mask-contain``."""
    units_file = args.mask_units
    id_col = args.mask_unit_id or args.unit
    if units_file is None and getattr(args, "units", None) is not None:
        # The records' units came from a polygon file: keep them inside those polygons.
        units_file, id_col = args.units, args.mask_unit_id or getattr(args, "unit_id", None)
    if units_file is None:
        return None
    if args.unit is None and getattr(args, "units", None) is None:
        raise InputError(
            "--mask-units needs the records' units (--unit COL or --units FILE): "
            "the unit each record must stay inside"
        )
    import geopandas as gpd

    try:
        frame = gpd.read_file(units_file)
    except Exception as exc:  # any reader failure is bad input
        raise InputError(
            f"unit polygon file {units_file.name!r} could not be read "
            f"({type(exc).__name__}); give a GeoPackage, GeoJSON or shapefile"
        ) from None
    if id_col is None or id_col not in frame.columns:
        raise InputError(
            f"unit polygon file {units_file.name!r} has no unit id column {id_col!r}; name it "
            "with --mask-unit-id"
        )
    target = getattr(table, "working_crs", None) or args.crs
    if target and frame.crs is not None:
        frame = frame.to_crs(target)
    by_id = dict(zip(frame[id_col].astype(str), frame.geometry, strict=False))
    missing = [str(u) for u in table.unit_names if str(u) not in by_id]
    if missing:
        raise InputError(
            f"{len(missing)} units have no polygon in {units_file.name!r} "
            f"(e.g. {', '.join(missing[:5])}); every unit needs one for --mask-contain"
        )
    return [by_id[str(u)] for u in table.unit_names]


def _print_sweep(result: Any, out: Any) -> None:
    full = any(c.mean_displacement_m is not None for c in result.cells)
    many_masks = len(result.masks) > 1
    pol = result.policy
    print(
        f"{result.n_records:,} records, {result.n_subjects:,} subjects; caps: tau "
        f"{_pct(pol.tau)}, unit cap {_pct(pol.unit_cap)}; first-pass labels",
        file=out,
    )
    head = (
        (f"{'mask':<30}" if many_masks else "")
        + f"{'k':>3}{'r_max':>8}{'ok':>8}{'merge':>8}{'gener.':>8}{'suppr.':>8}"
        + f"{'global':>9}  {'worst unit':<14}{'share':>8}{'over':>6}  passes"
        + ("  mean disp." if full else "")
    )
    print(head, file=out)
    for c in result.cells:
        n = sum(c.counts.values()) or 1
        labels = "".join(f"{100 * v / n:>6.1f} %" for v in c.counts.values())
        worst = str(c.worst_unit) if c.worst_unit_share > 0 else "-"
        line = (
            (f"{c.mask[:29]:<30}" if many_masks else "")
            + f"{c.k:>3}{c.r_max_m:>8g}{labels}{100 * c.suppressed_share:>7.2f} %  "
            + f"{worst[:13]:<14}{100 * c.worst_unit_share:>6.1f} %"
            + f"{c.units_over_cap:>6}  {'yes' if c.passes else 'no':<6}"
        )
        if full:
            d = c.mean_displacement_m
            if c.fixed_point is False:
                line += "  no fixed point"
            else:
                line += "         -" if d is None or d != d else f"{d:>9.1f} m"
        print(line.rstrip(), file=out)
    if full and any(c.fixed_point is False for c in result.cells):
        print(
            "no fixed point: the release core's labels did not settle within 5 passes; "
            "a release with those parameters would be refused as unsatisfiable",
            file=out,
        )
    print(result.recommendation(), file=out)


def cmd_sweep(args: argparse.Namespace) -> int:
    from geokanon.sweep import parse_list, sweep

    ks = parse_list(args.k, name="--k", kind=int) if args.k is not None else []
    rs = parse_list(args.r_max_m, name="--r-max") if args.r_max_m is not None else []
    scalar = argparse.Namespace(**vars(args))
    scalar.k = ks[0] if ks else None
    scalar.r_max_m = rs[0] if rs else None
    policy = _policy_from_args(scalar)
    ks = ks or [policy.k]
    rs = rs or [policy.r_max_m]
    masks = _sweep_masks(args)
    if args.mask_units is not None and not (masks and any(m and m.contain for m in masks)):
        raise InputError("--mask-units is used only with --mask-contain and a mask")
    table = _read_input(args)
    try:
        from geokanon.io import check_r_max
    except ImportError:  # pragma: no cover - older io
        pass
    else:
        for r in rs:
            check_r_max(table, r)
    from geokanon.pipeline import on_ground

    policy = on_ground(table, policy, pad_m=max(rs))  # r_max on the ground, for every cell
    contain = masks is not None and any(m is not None and m.contain for m in masks)
    polygons = _mask_polygons(args, table) if contain else None
    mask_key = _mask_key(args, bool(masks and any(m is not None for m in masks)))
    mask_subjects = None
    if masks and args.subject:
        mask_subjects = _mask_subject_ids(args, table)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=UserWarning)
        warnings.simplefilter("default", category=PrivacyRiskWarning)
        result = sweep(
            table.x, table.y, ks, rs, policy, subjects=table.subjects, times=table.times,
            unit_codes=table.unit_codes, unit_names=table.unit_names, masks=masks,
            mask_subjects=mask_subjects, unit_polygons=polygons, full=args.full,
            mask_key=mask_key, progress=within(_progress(args), "sweep"),
        )  # fmt: skip
    _end_progress(args)  # the bars end above the results
    if args.json:
        rows = [
            {k: (None if isinstance(v, float) and v != v else v) for k, v in row.items()}
            for row in result.rows()
        ]
        print(json.dumps({"cells": rows, "recommendation": result.recommendation()}))
    else:
        _print_sweep(result, sys.stdout)
    if args.out is not None:
        from geokanon.report.sweep_page import write_sweep_outputs

        paths = write_sweep_outputs(result, args.out)
        if not args.json:
            print(f"wrote {', '.join(p.name for p in paths.values())} to {args.out}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from geokanon.report.html import rebuild_report

    path, results = rebuild_report(args.dir)
    print(f"report written to {path}")
    for name, ok in results.items():
        print(f"{'PASS' if ok else 'FAIL'} {name}")
    return 0 if all(results.values()) else 4


def cmd_risk(args: argparse.Namespace) -> int:
    from geokanon.io import read_points
    from geokanon.risk import format_risk, release_risk

    audit = args.dir / "audit" / "audit.json"
    if not audit.exists():
        raise InputError(f"{str(args.dir)!r} is not a geokanon release directory (no audit/)")
    opts = _options_of_release(args, json.loads(audit.read_text()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = read_points(
            _source_input(args, opts), **opts, progress=within(_progress(args), "read")
        )
    risk = release_risk(args.dir, source=table)
    if args.json:
        print(json.dumps(risk.to_dict(), indent=None, allow_nan=False))
    else:
        print(format_risk(risk))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``geokanon`` (exposed for documentation and tests)."""
    parser = argparse.ArgumentParser(
        prog="geokanon",
        description="Spatially k-anonymous releases of sensitive point records, "
        "with honest handling of outliers.",
        epilog="exit codes: 0 done; 2 bad input or parameters (or another run is writing "
        "--out); 3 release refused; 4 verification failed; 5 the output could not be "
        "written (read-only or full filesystem, no permission)",
    )
    parser.add_argument("--version", action="version", version=f"geokanon {__version__}")
    parser.add_argument(
        "--quiet",
        "-q",
        action="store_true",
        help="no progress display; warnings and errors only (on a terminal the progress is "
        "live bars, elsewhere plain lines)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    fmt = argparse.RawDescriptionHelpFormatter

    p = sub.add_parser(
        "classify",
        parents=[_input_options(), _policy_options(), _backend_options()],
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
    p.add_argument("--out", type=Path, help="directory for the outputs (geokanon-demo)")
    p.add_argument("--force", action="store_true", help="replace an existing output directory")
    p.set_defaults(func=cmd_demo)

    # -- release / verify commands (lead) --
    p = sub.add_parser(
        "release",
        parents=[_input_options(), _policy_options(), _backend_options()],
        help="the whole pipeline: write DIR/release (publishable) and DIR/audit",
        epilog=EXAMPLES["release"],
        formatter_class=fmt,
    )
    p.add_argument(
        "--out",
        type=_path_or_url,
        required=True,
        help="output directory DIR (required), or postgresql://... with --out-schema and --audit",
    )
    p.add_argument(
        "--force", action="store_true", help="replace an existing DIR (or schema) atomically"
    )
    p.add_argument(
        "--keep",
        action="append",
        default=[],
        help=(
            "attribute columns to publish, comma-separated (or --keep given once per column; "
            "a value that is exactly a column's name is that column, commas included)"
        ),
    )
    _database_out_options(p)
    p.add_argument(
        "--local-metres",
        action="store_true",
        help="x/y have no CRS: they are metres in a local frame with no EPSG code (without "
        "--crs, release refuses otherwise); the manifest, notes and report say so",
    )
    p.add_argument(
        "--totals",
        choices=["released", "complementary", "withhold"],
        default="released",
        help="how totals are published (released)",
    )
    p.add_argument(
        "--gpkg-records",
        choices=["auto", "yes", "no"],
        default="auto",
        help="a records layer in release.gpkg: auto (up to 1,000,000 published records), yes, no",
    )
    p.add_argument(
        "--gpkg-groups",
        choices=["auto", "yes", "no"],
        default="auto",
        help="groups and group_extents layers in release.gpkg: auto (up to 1,000,000 "
        "published records), yes, no",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="print the resolved plan and exit; write nothing"
    )
    g = p.add_argument_group("mask (applied before classification)")
    g.add_argument("--mask", choices=["jitter", "donut"], help="geomask kind")
    g.add_argument("--mask-sd", type=float, help="jitter: standard deviation, m")
    g.add_argument("--mask-min", type=float, help="donut: minimum displacement, m")
    g.add_argument("--mask-max", type=float, help="donut: maximum (jitter: truncation), m")
    g.add_argument(
        "--mask-key",
        type=Path,
        metavar="FILE",
        help="secret key of the mask (>= 16 random bytes, e.g. an earlier DIR/audit/mask_key); "
        "default: drawn from the OS random source (or kept from DIR when --force replaces it); "
        "kept in DIR/audit/mask_key, never published",
    )
    p.add_argument(
        "--membership-sensitive",
        action="store_true",
        default=None,
        help="replace suppression by generalisation to the whole area",
    )
    p.add_argument(
        "--allow-synthetic",
        action="store_true",
        default=None,
        help="stand in for each suppressed subject with one synthetic record in a class of "
        "its unit (counted in the manifest and units.csv; never towards k)",
    )
    p.set_defaults(func=cmd_release)

    p = sub.add_parser(
        "describe",
        parents=[_input_options(), _policy_options()],
        help="print the resolved plan (CRS chosen, policy, units found) without running",
        epilog="example:\n  geokanon describe dwellings.csv --k 5 --r-max 300 --unit gm_code\n",
        formatter_class=fmt,
    )
    p.set_defaults(func=cmd_describe)

    p = sub.add_parser(
        "verify",
        parents=[_input_options(positional=False), _policy_options(of_release=True)],
        help="re-read a written release and its source and run every check",
        epilog=EXAMPLES["verify"],
        formatter_class=fmt,
    )
    p.add_argument(
        "dir",
        type=_path_or_url,
        help="the release directory DIR (with release/ and audit/), or postgresql://... with "
        "--out-schema and --audit",
    )
    p.add_argument(
        "--source",
        type=_path_or_url,
        required=True,
        help="the source of the release (required): its file, or its postgresql:// URL",
    )
    _database_out_options(p)
    g = p.add_argument_group("backend (see docs/dask.md)")
    g.add_argument(
        "--backend", choices=["local", "dask"], default="local",
        help="dask: the partitioned verifier (automatic for a partitioned release)",
    )  # fmt: skip
    g.add_argument("--scheduler", metavar="ADDRESS", help="Dask scheduler address")
    g.add_argument("--workers", type=int, help="workers of the local Dask cluster")
    p.set_defaults(func=cmd_verify)
    # -- sweep command (sweep helper) --
    p = sub.add_parser(
        "sweep",
        parents=[_input_options(), _policy_options()],
        conflict_handler="resolve",  # --k and --r-max become lists here
        help="the trade-off table and tau-frontier plot over lists of k and r_max",
        epilog=SWEEP_EXAMPLES,
        formatter_class=fmt,
    )
    g = p.add_argument_group("sweep")
    g.add_argument(
        "--k", help="comma-separated values of k, e.g. 3,5,10 (required, or in --config)"
    )
    g.add_argument(
        "--r-max", dest="r_max_m", help="comma-separated r_max values, m (required, or in --config)"
    )
    g.add_argument("--mask", choices=["jitter", "donut"], help="geomask applied before classifying")
    g.add_argument("--mask-sd", help="jitter levels: comma-separated sd values, m (0 = no mask)")
    g.add_argument("--mask-min", type=float, help="donut: smallest displacement, m (0)")
    g.add_argument("--mask-max", help="donut levels, m (0 = no mask); jitter: one truncation")
    g.add_argument("--mask-contain", action="store_true", help="keep records inside their unit")
    g.add_argument("--mask-units", type=Path, help="unit polygon file for --mask-contain")
    g.add_argument("--mask-unit-id", help="unit id column of --mask-units (default: --unit)")
    g.add_argument(
        "--mask-key",
        type=Path,
        metavar="FILE",
        help="secret key of the masks (e.g. a release's DIR/audit/mask_key); default: a new "
        "random key, so masked figures vary slightly from run to run",
    )
    g.add_argument("--full", action="store_true", help="also run the release core per cell")
    g.add_argument("--out", type=Path, help="write sweep.csv, tau_frontier.svg/.png, sweep.html")
    g.add_argument("--json", action="store_true", help="print the cells as one JSON object")
    p.set_defaults(func=cmd_sweep)
    # -- report command (report helper) --
    p = sub.add_parser(
        "report",
        help="rebuild DIR/release/report.html and update the manifest's checksums",
        epilog="example:\n  geokanon report out/dwellings\n",
        formatter_class=fmt,
    )
    p.add_argument("dir", type=Path, help="the release directory DIR (with release/ and audit/)")
    p.set_defaults(func=cmd_report)
    # -- risk command (testing/risk helper) --
    p = sub.add_parser(
        "risk",
        parents=[_input_options(positional=False), _policy_options(of_release=True)],
        help="re-identification risk per record: subjects consistent with its published place",
        epilog="example:\n  geokanon risk out/dwellings --source dwellings.csv\n",
        formatter_class=fmt,
    )
    p.add_argument("dir", type=Path, help="the release directory DIR (with release/ and audit/)")
    p.add_argument(
        "--source",
        type=_path_or_url,
        required=True,
        help="the source of the release (required): its file, or its postgresql:// URL",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(func=cmd_risk)
    return parser


def _database_out_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("database output (--out postgresql://...)")
    g.add_argument("--out-schema", metavar="NAME", help="schema that holds the release's tables")
    g.add_argument(
        "--audit",
        type=Path,
        metavar="DIR",
        help="local directory for the audit (DIR/audit; never written to the database) and "
        "the release files as loaded (DIR/release)",
    )


def run(argv: Sequence[str] | None = None) -> int:
    """The process's entry (the ``geokanon`` script, ``python -m geokanon``): :func:`main`,
    then its output flushed and the heap frozen out of Python's cyclic collector, whose
    last pass at the interpreter's exit would walk every object numba, pandas and the run
    left (0.2-0.3 s); the process ends right after, so nothing it would free matters.

    Before :func:`main`, glibc is told to keep freed memory for reuse
    (:func:`geokanon._heap.keep_freed_memory`): the process is the command's alone."""
    import gc

    from geokanon._heap import keep_freed_memory

    keep_freed_memory()
    code = main(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    gc.freeze()
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit code (callable many times in one process)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    from geokanon._display import open_display

    # The display ends (its last line or bar closed) before an error line is printed.
    args.display = open_display(quiet=bool(args.quiet), stream=sys.stderr)
    try:
        with args.display, warnings.catch_warnings():
            warnings.simplefilter("default")
            warnings.showwarning = _warning_printer(args.display)
            if args.command in _WITH_PROGRESS:  # something shows from the first moment
                args.display("start", "loading modules")
            if args.command in _COMPILES:
                from geokanon._jit import COMPILE_NOTE, kernels_cached

                if not kernels_cached():  # else the first run sits silent for minutes
                    args.display.message(COMPILE_NOTE)
            _tidy_output_parent(args)
            return int(args.func(args))
    except GeokanonError as exc:
        print(f"geokanon: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("geokanon: interrupted; nothing was written", file=sys.stderr)
        return 130


#: Commands that report their stages (the others finish at once).
_WITH_PROGRESS = frozenset({"classify", "release", "verify", "sweep", "risk", "demo"})

#: Commands that run the classification and grouping kernels (compiled on first use).
_COMPILES = frozenset({"classify", "release", "sweep", "demo"})


def _tidy_output_parent(args: argparse.Namespace) -> None:
    """Before anything else, remove what killed runs left beside the directory named.

    Every command naming an output or release directory (``--out``, ``DIR``) tidies its
    parent's build area (``geokanon._outdir``): a killed run's audit never waits there for
    a later release to a different directory.
    """
    from geokanon._outdir import remove_stale

    target = getattr(args, "out", None)
    if isinstance(target, str):  # a database: its local directory is --audit DIR
        target = getattr(args, "audit", None)
    if target is None and args.command == "demo":
        target = Path("geokanon-demo")
    if target is None:
        target = getattr(args, "dir", None)
    if isinstance(target, Path):
        for note in remove_stale(target):
            warnings.warn(note, stacklevel=2)


def _warning_printer(display: Any) -> Any:
    """``warnings.showwarning`` for the CLI: one line through the display (never mid-line)."""

    def show(message: Any, category: Any, *_: Any, **__: Any) -> None:
        display.message(f"geokanon: warning: {message}")

    return show


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
