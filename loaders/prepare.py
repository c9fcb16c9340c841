"""`dgbench prepare file|epinions|flickr|youtube|amlsim|gdelt|lastfm`: raw files -> a store.

``file`` reads any file of a known format family (``--format F --raw PATH``); the named data sets
are the same pipeline with the papers' defaults (ESDG Table 1: daily snapshots for the Network
Repository graphs, per-step snapshots for AMLSim; TGL/JODIE edge streams for GDELT and LastFM) and
registered download URLs, used when no ``--raw`` is given.
"""
from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from dgbench.errors import DgbenchError
from dgbench.files import scratch_dir
from dgbench.registry import register_preparer
from dgbench.loaders import amlsim, edgelists, jodie, tgl, tgn  # noqa: F401  (register the format families)
from dgbench.loaders.download import RemoteFile, default_cache_dir, fetch
from dgbench.loaders.events import Events, PreparedEvents, normalise, to_seconds
from dgbench.loaders.guards import check_events, check_prepared
from dgbench.loaders.formats import FORMATS, TIME_UNITS, Format, LoadOptions, RawInput, get_format, open_raw
from dgbench.loaders.stores import (DUPLICATE_POLICIES, events_provenance, loader_provenance, resolve_window,
                                    write_snapshots, write_stream)
from dgbench.loaders.streamed import STREAM_SOURCES, NotTimeSorted, prepare_stream_store

STORE_KINDS = ("snapshots", "stream")
COLUMN_FORMATS = ("snap", "network-repository", "konect")  # the formats --columns applies to
NR_DOWNLOADS = "https://nrvis.com/download/data/dynamic"
TGL_DOWNLOADS = "https://s3.us-west-2.amazonaws.com/dgl-data/dataset/tgl"


@dataclass(frozen=True)
class Dataset:
    """A named data set: its format, the store it makes by default, and where its raw files are."""

    name: str
    format: str
    to: str
    summary: str
    files: tuple[RemoteFile, ...]
    raw_name: str  # the file (or folder, for multi-file sets) the format reads after download
    also: tuple[str, ...] = ()  # other formats it is published in, recognised from a --raw folder/file


def _nr(name: str, filename: str, summary: str) -> Dataset:
    page = f"https://networkrepository.com/{filename}.php"
    return Dataset(name, "network-repository", "snapshots", summary,
                   (RemoteFile(f"{NR_DOWNLOADS}/{filename}.zip", f"{filename}.zip", page=page),), f"{filename}.zip")


# Checksums: none of these hosts publishes one and they could not be fetched here, so a first
# download is trusted and its sha256 recorded in the store's provenance (compare stores by it).
DATASETS = {d.name: d for d in (
    _nr("epinions", "rec-epinions-user-ratings", "Epinions ratings (ESDG: N~755K, T=501 daily snapshots)"),
    _nr("flickr", "soc-flickr-growth", "Flickr growth (ESDG: N~2.3M, T=134 daily snapshots)"),
    _nr("youtube", "soc-youtube-growth", "YouTube growth (ESDG: N~3.2M, T=203 daily snapshots)"),
    Dataset("amlsim", "amlsim", "snapshots",
            "AMLSim transactions, one snapshot per step, SAR flags as labels (ESDG: 1M accounts, T=200)",
            (RemoteFile("https://github.com/IBM/AMLSim/raw/master/sample/20K_fanin200cycle200.tgz",
                        "20K_fanin200cycle200.tgz",
                        page="https://github.com/IBM/AMLSim (the paper-scale 1M-account run is made by running "
                             "AMLSim; pass its output folder)"),), "20K_fanin200cycle200.tgz"),
    Dataset("gdelt", "tgl", "stream", "GDELT (TGL): 16,682 nodes, 191M events, 182-dim edge features",
            tuple(RemoteFile(f"{TGL_DOWNLOADS}/GDELT/{f}", f, page="https://github.com/amazon-research/tgl (down.sh)")
                  for f in ("edges.csv", "edge_features.pt", "node_features.pt")), "."),
    Dataset("lastfm", "jodie", "stream", "LastFM (JODIE): 980 users + 1,000 items, 1,293,103 events",
            (RemoteFile("https://snap.stanford.edu/jodie/lastfm.csv", "lastfm.csv",
                        page="https://snap.stanford.edu/jodie/"),), "lastfm.csv", also=("tgl",)),
)}


def common_options(to_default: str | None) -> list[click.Option]:
    return [
        click.Option(["--to"], type=click.Choice(STORE_KINDS), default=to_default, show_default=True,
                     help="Store kind to write (default: what the data naturally is)."),
        click.Option(["--window"], default="auto", show_default=True,
                     help="Snapshot length: 1d, 12h, 30m, 45s, 2w, or a plain number of time units "
                          "(auto: one step for step-timed data, else 1d)."),
        click.Option(["--duplicates"], type=click.Choice(DUPLICATE_POLICIES), default="keep", show_default=True,
                     help="Repeated (src, dst) in one snapshot: keep as multi-edges or sum their weights."),
        click.Option(["--drop-partial-last-line"], is_flag=True,
                     help="Drop a last line cut off mid-row (a broken download) instead of failing."),
        click.Option(["--bipartite/--shared-ids"], default=None,
                     help="Users/items in separate id spaces (items shifted after users); default per format."),
        click.Option(["--edge-life"], type=click.IntRange(1), default=None,
                     help="Smooth the snapshots with edge-life L (ESDG §5.4); the store written is the smoothed one."),
        click.Option(["--m-product"], type=click.IntRange(1), default=None,
                     help="Smooth the snapshots with the M-product over W steps (TM-GCN)."),
        click.Option(["--member"], default=None,
                     help="The file (path inside, or data set name) to read when a folder or archive holds several."),
        click.Option(["--columns"], default=None,
                     help="Which columns are src,dst,time[,weight][,label] (edge lists): header names or "
                          "1-based positions, e.g. --columns 2,3,1; '-' skips weight."),
        click.Option(["--time-unit"], type=click.Choice(TIME_UNITS), default=None,
                     help="Unit of numeric times when not seconds (ms, us, ns: converted to seconds)."),
        click.Option(["--force"], is_flag=True,
                     help="Write the store even when a plausibility check finds the file looks misread."),
    ]


def build_smoothed(build: Callable[[Path], Path], out: Path, overwrite: bool, edge_life: int | None,
                   m_product: int | None) -> Path:
    """Build the plain store in a hidden temporary directory, smooth it into ``out``, drop the plain one."""
    if edge_life is None and m_product is None:
        return build(out)
    from dgbench.loaders.smoothing import smooth
    if out.exists() and not overwrite:
        raise DgbenchError(f"{out}: a store already exists (pass --overwrite to replace it)")
    out.parent.mkdir(parents=True, exist_ok=True)
    scratch = scratch_dir(out.parent, f".{out.name}.unsmoothed")
    try:
        plain = build(scratch / "plain.zarr")
        return smooth(plain, life=edge_life, window=m_product, out=out, overwrite=overwrite)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def build_store(*, raw: Path, fmt: Format, out: Path, overwrite: bool, to: str | None, window: str,
                duplicates: str, options: LoadOptions, source: str, extra: dict[str, Any] | None = None,
                edge_life: int | None = None, m_product: int | None = None) -> Path:
    """Parse ``raw`` with ``fmt`` and write the store (smoothed when asked); nothing is left behind on error."""
    if (edge_life is not None or m_product is not None) and (to or fmt.natural) != "snapshots":
        raise DgbenchError("--edge-life/--m-product smooth snapshots: add --to snapshots")
    if edge_life is not None and m_product is not None:
        raise DgbenchError("choose one smoothing transform: --edge-life L or --m-product W")
    return build_smoothed(lambda target: _build_plain(raw=raw, fmt=fmt, out=target, overwrite=overwrite, to=to,
                                                       window=window, duplicates=duplicates, options=options,
                                                       source=source, extra=extra),
                          Path(out), overwrite, edge_life, m_product)


def _build_plain(*, raw: Path, fmt: Format, out: Path, overwrite: bool, to: str | None, window: str,
                 duplicates: str, options: LoadOptions, source: str, extra: dict[str, Any] | None) -> Path:
    out = Path(out)
    if out.exists() and not overwrite:
        raise DgbenchError(f"{out}: a store already exists (pass --overwrite to replace it)")
    kind = to or fmt.natural
    if duplicates == "sum" and kind == "stream":
        raise DgbenchError("--duplicates sum merges edges within a snapshot; a stream keeps every event")
    if options.columns is not None and fmt.name not in COLUMN_FORMATS:
        raise DgbenchError(f"--columns applies to the edge-list formats ({', '.join(COLUMN_FORMATS)}); "
                           f"{fmt.name} files name their columns in their header")
    with open_raw(raw, fmt, scratch=out.parent, member=options.member) as found:
        if kind == "stream":
            streamed = _build_streamed(raw, found, fmt, out, overwrite, options, source, extra)
            if streamed is not None:
                return streamed
        events = fmt.load(found.path, options)
        apply_time_unit(events, options.time_unit)
        if found.archive is not None:
            events.raw_files.insert(0, found.archive)
        check_events(events, options.force, columns_given=options.columns is not None)
        prepared = normalise(events)
        check_prepared(prepared, options.force)
        _report_repairs(prepared, found.member and f"{found.member} from {Path(raw).name}")
        provenance = loader_provenance(prepared, source=source, fmt=fmt.name, loader=fmt.load.__module__,
                                       params=_params(kind, raw, found, options, events), extra=extra)
        if kind == "snapshots":
            return write_snapshots(prepared, out, window=resolve_window(window, events.time_unit),
                                   duplicates=duplicates, provenance=provenance, overwrite=overwrite)
        return write_stream(prepared, out, provenance=provenance, overwrite=overwrite)


def _params(kind: str, raw: Path, found: RawInput, options: LoadOptions, events: Events) -> dict[str, Any]:
    """The prepare parameters recorded in the provenance."""
    return {"to": kind, "drop_partial_last_line": options.drop_partial_last_line, "bipartite": events.bipartite,
            "raw_path": str(raw), **({"member": found.member} if found.member else {}),
            **({"columns": options.columns} if options.columns else {}),
            **({"time_unit": options.time_unit} if options.time_unit else {})}


def _build_streamed(raw: Path, found: RawInput, fmt: Format, out: Path, overwrite: bool, options: LoadOptions,
                    source: str, extra: dict[str, Any] | None) -> Path | None:
    """The stream store prepared in bounded memory (loaders/streamed.py) when the format offers it and the
    file allows (UTF-8, seconds, times sorted); None: use the in-memory path (nothing was written)."""
    make = STREAM_SOURCES.get(fmt.name)
    if make is None or options.time_unit not in (None, "s"):
        return None
    stream = make(found.path, options)
    if stream is None:
        return None
    finish = stream.finish

    def finished(rows: int) -> Events:
        events = finish(rows)
        if found.archive is not None:
            events.raw_files.insert(0, found.archive)
        return events

    def provenance_of(events: Events, rows: int) -> dict[str, Any]:
        return events_provenance(events, rows, 0, source=source, fmt=fmt.name, loader=fmt.load.__module__,
                                 params=_params("stream", raw, found, options, events), extra=extra)

    def report(events: Events) -> None:
        _report_notes(events, 0, found.member and f"{found.member} from {Path(raw).name}")

    stream.finish = finished
    try:
        return prepare_stream_store(stream, out, overwrite=overwrite, force=options.force,
                                    provenance_of=provenance_of, report=report)
    except NotTimeSorted:
        return None


def apply_time_unit(events: Events, unit: str | None) -> None:
    """``--time-unit ms|us|ns``: numeric times converted to seconds (date-times and steps refused)."""
    if unit is None or unit == "s":
        return
    if events.time_unit != "s" or events.details.get("time_format", "number") != "number":
        what = "simulation steps" if events.time_unit == "step" else "date-times"
        raise DgbenchError(f"--time-unit {unit}: {events.source_file.name}'s times are {what}, not numbers of {unit}")
    events.t = to_seconds(events.t, TIME_UNITS[unit])


def _report_repairs(prepared: PreparedEvents, member: str | None = None) -> None:
    _report_notes(prepared.source, prepared.rows_out_of_order, member)


def _report_notes(events: Events, rows_out_of_order: int, member: str | None = None) -> None:
    """One stderr line naming the member read from a folder/archive and any rows re-ordered or dropped
    (all also in the provenance)."""
    notes = [f"read {member}"] if member else []  # "a/b.edges from x.zip"
    if rows_out_of_order:
        notes.append(f"{rows_out_of_order:,} rows were out of time order (sorted stably)")
    if events.rows_dropped:
        notes.append(f"{events.rows_dropped:,} cut-off last line dropped")
    if notes:  # what was done to the data is said even under --quiet (which turns progress bars off)
        click.echo(f"note: {events.source_file.name}: {'; '.join(notes)}", err=True)


FILE_OPTIONS = [
    click.Option(["--format", "fmt"], required=True, type=click.Choice(sorted(FORMATS)),
                 help="Format family of the raw file."),
    click.Option(["--raw"], required=True, type=click.Path(path_type=Path),
                 help="The raw file, its folder (TGL, AMLSim) or an archive of it (.zip/.tar.*/.gz/.bz2)."),
    *common_options(None),
]


@register_preparer("file", kind="format", produces="snapshots|stream", options=FILE_OPTIONS,
                   summary="Any raw file of a known format family (--format F --raw PATH)")
def build_file(out: Path, overwrite: bool = False, *, fmt: str, raw: Path, to: str | None = None,
               window: str = "auto", duplicates: str = "keep", edge_life: int | None = None,
               m_product: int | None = None, **parsing: Any) -> Path:
    """``parsing``: LoadOptions fields (drop_partial_last_line, bipartite, member, columns, time_unit, force)."""
    return build_store(raw=raw, fmt=get_format(fmt), out=out, overwrite=overwrite, to=to, window=window,
                       duplicates=duplicates, options=load_options(**parsing), source="file",
                       edge_life=edge_life, m_product=m_product)


def load_options(**parsing: Any) -> LoadOptions:
    """LoadOptions from CLI keywords (None means the default)."""
    return LoadOptions(**{name: value for name, value in parsing.items() if value is not None})


def dataset_raw(dataset: Dataset, cache_dir: Path | None) -> Path:
    """The raw input of a named data set, downloaded into the cache when not there yet."""
    folder = (cache_dir or default_cache_dir()) / dataset.name
    for remote in dataset.files:
        fetch(remote, folder)
    return folder / dataset.raw_name


def dataset_format(dataset: Dataset, raw: Path) -> Format:
    """The data set's own format, or one of its other published formats when ``raw`` is laid out so
    (e.g. TGL's ``LASTFM/edges.csv`` folder for lastfm, whose default is JODIE's CSV)."""
    for name in dataset.also:
        other = get_format(name)
        names = [p.name for p in Path(raw).iterdir()] if Path(raw).is_dir() else [Path(raw).name]
        if any(Path(n).match(pattern) for n in names for pattern in other.patterns):
            return other
    return get_format(dataset.format)


def _register_dataset(dataset: Dataset) -> None:
    options = [click.Option(["--raw"], type=click.Path(path_type=Path), default=None,
                            help=f"Use this raw file/folder/archive instead of downloading "
                                 f"({', '.join(f.filename for f in dataset.files)})."),
               click.Option(["--cache-dir"], type=click.Path(path_type=Path), default=None,
                            help="Where downloads are kept (default $DGBENCH_CACHE or ~/.cache/dgbench/raw)."),
               *common_options(dataset.to)]

    def build(out: Path, overwrite: bool = False, *, raw: Path | None = None, cache_dir: Path | None = None,
              to: str | None = dataset.to, window: str = "auto", duplicates: str = "keep",
              edge_life: int | None = None, m_product: int | None = None, **parsing: Any) -> Path:
        source_path = raw if raw is not None else dataset_raw(dataset, cache_dir)
        urls = [f.url for f in dataset.files] if raw is None else []
        return build_store(raw=source_path, fmt=dataset_format(dataset, source_path), out=out, overwrite=overwrite,
                           to=to, window=window, duplicates=duplicates, options=load_options(**parsing),
                           source=dataset.name, extra={"download_urls": urls}, edge_life=edge_life,
                           m_product=m_product)

    build.__doc__ = dataset.summary
    register_preparer(dataset.name, kind="dataset", produces=dataset.to, options=options,
                      summary=dataset.summary)(build)


for _dataset in DATASETS.values():
    _register_dataset(_dataset)
