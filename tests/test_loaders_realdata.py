"""Every real file in ../shared/data through its loader: counts must match its PROVENANCE.md."""
from __future__ import annotations

import csv
import tarfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from dgbench.cli import cli
from dgbench.errors import InputError
from dgbench.store import open_store
from dgbench.store.validate import validate_store
from dgbench.loaders.prepare import build_file
from tests.tgn_preprocessing import read_jodie_rows, write_tgn_processed

pytestmark = pytest.mark.realdata
DAY = 86400
# Store fingerprints of the real files as prepared on 87f9767 (before separator/encoding sniffing and
# column-identified AMLSim files): loader changes must keep every real file's store the same.
FINGERPRINTS = {
    "fb-forum": "55e4db67c532cc3e022362b6d1db3dde6712ca8720521def0c3114165c27b081",
    "ia-enron-employees": "4b751c4edcd6f69e87f748e27e2c8194d0f13eca7431f5b4a5fd80fb14354c35",
    "CollegeMsg stream": "e5e47b75441ab737e3acc91655213ee0a83c0a75624d7bee3aacb8ec9cee9247",
    "chess": "f70e354b15a085b8f70c6f2e3f794eeda22575a54cd00c261465ae8d37184289",
    "lastfm dropped": "0206af5caafe8d943f468a2ac0628f9fce8a2018d82ec5bf6c40c34581d87fd4",
    "lastfm sample": "a727fd7fcccd32495f209dd7942614cf030afb45e083a71ea4248a5fa77f3a4b",
    "wikipedia": "43f8dc03e525b322db3fd9acef9c796315f5b23c2375554ae3a7bce866969867",
    "20K_cycle200": "57747a89c44fbcaacb96f7d411bec26ce8d5b26d3a4254e8cb013165d6106905",
    "20K_fanin200": "f37cc89f17d284d695e68cba7ad72f1b07654ea4520543be2602ff35f1a21767",
    "20K_fanin200cycle200": "23008b6c594866d460070c310fe5e9f20b0d2072f910fa6303a2127ab6c0e21d",
    "amlsim outputs": "d75630bf7d5165454807d6dfc4612a1b56a0961a39950246e281a3b389ac8884",
}


def prepare(tmp_path: Path, fmt: str, raw: Path, **options):
    path = build_file(out=tmp_path / "store.zarr", fmt=fmt, raw=raw, **options)
    assert validate_store(path) == []
    return open_store(path)


def all_edges(store) -> dict[str, np.ndarray]:
    if store.kind == "stream":
        return store.events()
    names = ["src", "dst"] + [n for n in ("weight", "time", "label") if store.has(n)]
    return {n: store.read(n) for n in names}


def distinct_pairs(edges: dict[str, np.ndarray]) -> int:
    return len(np.unique(edges["src"].astype(np.int64) * (1 << 32) + edges["dst"]))


def test_network_repository_fb_forum(shared_data: Path, tmp_path: Path) -> None:
    store = prepare(tmp_path, "network-repository", shared_data / "networkrepository_dynamic" / "fb-forum.edges")
    edges = all_edges(store)
    assert (store.num_nodes, store.num_edges, distinct_pairs(edges)) == (899, 33_720, 7_089)
    assert (edges["time"].min(), edges["time"].max()) == (1_084_585_996, 1_098_798_101)
    assert store.num_snapshots == (1_098_798_101 - 1_084_585_996) // DAY + 1
    assert store.provenance["raw_sha256"] == "4aa6ba14f2440e582e1cec3357ef9a4ac8020fe72ec6b31a7ff746e291356088"
    assert store.provenance["rows_read"] == 33_720 and store.provenance["rows_out_of_order"] == 0
    assert store.fingerprint == FINGERPRINTS["fb-forum"]


def test_network_repository_enron_without_final_newline(shared_data: Path, tmp_path: Path) -> None:
    store = prepare(tmp_path, "network-repository",
                    shared_data / "networkrepository_dynamic" / "ia-enron-employees.edges")
    edges = all_edges(store)
    assert (store.num_nodes, store.num_edges, distinct_pairs(edges)) == (151, 50_572, 2_235)
    assert (edges["time"].min(), edges["time"].max()) == (926_389_620, 1_024_674_019)
    assert np.all(edges["weight"] == 1)
    assert store.provenance["raw_sha256"] == "550a509fdbbfa31dba52a7de85bc42ade8937bb1134c83bf5a3d8391061aeb34"
    assert store.fingerprint == FINGERPRINTS["ia-enron-employees"]


def test_snap_college_msg(shared_data: Path, tmp_path: Path) -> None:
    store = prepare(tmp_path, "snap", shared_data / "snap_CollegeMsg" / "CollegeMsg.txt", to="stream")
    events = store.events()
    assert (store.num_nodes, store.num_events, distinct_pairs(events)) == (1_899, 59_835, 20_296)
    assert len(np.unique(events["t"])) == 58_911
    assert (events["t"][0], events["t"][-1]) == (1_082_040_961, 1_098_777_142)
    assert np.array_equal(store.node_ids(), np.arange(1, 1_900))  # ids 1..1899 relabelled to 0..1898
    assert store.provenance["duplicates"] == 37  # rows minus distinct (src, dst, t) rows of the raw file
    assert store.fingerprint == FINGERPRINTS["CollegeMsg stream"]


def test_konect_chess_mixed_separators(shared_data: Path, tmp_path: Path) -> None:
    store = prepare(tmp_path, "konect", shared_data / "konect_chess" / "out.chess.csv")
    edges = all_edges(store)
    assert (store.num_nodes, store.num_edges, distinct_pairs(edges)) == (7_301, 65_053, 60_046)
    assert len(np.unique(edges["time"])) == 100
    assert edges["time"].min() == pytest.approx(885_635_999.999997) and edges["time"].max() == 1_145_808_000
    weights, counts = np.unique(edges["weight"], return_counts=True)
    assert dict(zip(weights.tolist(), counts.tolist())) == {-1.0: 15_224, 0.0: 28_666, 1.0: 21_163}
    assert store.directed  # "% asym"
    assert store.fingerprint == FINGERPRINTS["chess"]


def test_jodie_lastfm_truncated_fails_naming_the_line(shared_data: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"lastfm\.csv:108503: the file ends mid-line .*--drop-partial-last-line"):
        build_file(out=tmp_path / "s.zarr", fmt="jodie", raw=shared_data / "jodie_lastfm" / "lastfm.csv")
    assert list(tmp_path.iterdir()) == []  # nothing left behind


def test_jodie_lastfm_truncated_with_drop(shared_data: Path, tmp_path: Path) -> None:
    store = prepare(tmp_path, "jodie", shared_data / "jodie_lastfm" / "lastfm.csv", drop_partial_last_line=True)
    events = store.events()
    assert store.attrs["bipartite"] == {"num_users": 271, "num_items": 778}
    assert (store.num_nodes, store.num_events, distinct_pairs(events)) == (1_049, 108_501, 19_434)
    assert (events["t"][0], events["t"][-1]) == (0, 31_633_598)
    # PROVENANCE.md says 108,215 distinct timestamps, counting the cut-off row's partial "3163";
    # the 108,501 complete rows have 108,214 (checked with Python's csv module on the raw file).
    assert len(np.unique(events["t"])) == 108_214
    assert events["edge_features"].shape == (108_501, 2) and not events["edge_features"].any()
    assert not events["label"].any()
    assert store.provenance["rows_dropped"] == 1 and store.provenance["rows_read"] == 108_502
    assert store.provenance["format_details"]["header"].startswith("source,destination,")  # renamed header
    assert store.fingerprint == FINGERPRINTS["lastfm dropped"]


def test_jodie_lastfm_original_header_sample(shared_data: Path, tmp_path: Path) -> None:
    store = prepare(tmp_path, "jodie", shared_data / "jodie_lastfm" / "superhow_sample" / "lastfm.csv")
    events = store.events()
    assert store.attrs["bipartite"] == {"num_users": 11, "num_items": 34}
    assert store.num_events == 39 and (events["t"][0], events["t"][-1]) == (0, 41_282)
    assert store.fingerprint == FINGERPRINTS["lastfm sample"]


def test_jodie_wikipedia_tgn_reindexed(shared_data: Path, tmp_path: Path) -> None:
    store = prepare(tmp_path, "jodie", shared_data / "jodie_wikipedia_tgn" / "wikipedia.csv")
    events = store.events()
    assert store.attrs["bipartite"] == {"num_users": 8_227, "num_items": 1_000}
    assert (store.num_nodes, store.num_events, distinct_pairs(events)) == (9_227, 157_474, 18_257)
    assert int(events["label"].sum()) == 217
    assert (events["t"][0], events["t"][-1]) == (0, 2_678_373) and len(np.unique(events["t"])) == 152_757
    assert events["src"].max() < 8_227 <= events["dst"].min()  # items after users
    assert store.split["method"] == "quantile"
    assert store.fingerprint == FINGERPRINTS["wikipedia"]


@pytest.mark.parametrize("run, transactions, pairs, fraud", [
    ("20K_cycle200", 117_805, 116_256, 945),
    ("20K_fanin200", 118_250, 116_521, 954),
    ("20K_fanin200cycle200", 120_558, 117_341, 1_804),
])
def test_amlsim_2019_sample_runs(shared_data: Path, tmp_path: Path, run: str, transactions: int, pairs: int,
                                 fraud: int) -> None:
    store = prepare(tmp_path, "amlsim", shared_data / "amlsim" / "ibm_amlsim_sample_20K" / run)
    edges = all_edges(store)
    assert (store.num_nodes, store.num_edges, distinct_pairs(edges)) == (20_000, transactions, pairs)
    assert len(np.unique(np.concatenate([edges["src"], edges["dst"]]))) == 19_980
    assert (edges["time"].min(), edges["time"].max(), store.num_snapshots) == (1, 149, 149)
    assert int(store.read("node_label").sum()) == fraud
    assert np.array_equal(store.node_ids(), np.arange(20_000))
    assert store.fingerprint == FINGERPRINTS[run]


def test_amlsim_2019_tiny_outputs(shared_data: Path, tmp_path: Path) -> None:
    folder = shared_data / "amlsim" / "ibm_amlsim_sample_outputs"
    store = prepare(tmp_path, "amlsim", folder)
    edges = all_edges(store)
    assert (store.num_nodes, store.num_edges) == (30, 45)
    assert len(np.unique(np.concatenate([edges["src"], edges["dst"]]))) == 27
    assert (edges["time"].min(), edges["time"].max(), store.num_snapshots) == (1, 48, 48)
    with open(folder / "accounts.csv", newline="") as handle:
        flagged = {int(row["ACCOUNT_ID"]) for row in csv.DictReader(handle) if row["isFraud"] == "true"}
    flagged |= {24, 25}  # the two accounts of alerts.csv
    assert set(store.node_ids()[store.read("node_label") == 1].tolist()) == flagged
    assert {f["name"] for f in store.provenance["raw"]} == {"tx.csv", "accounts.csv", "alerts.csv"}
    assert store.fingerprint == FINGERPRINTS["amlsim outputs"]
    assert store.provenance["format_details"]["files"] == {  # known by their columns; cash_tx is no edge list
        "accounts.csv": "accounts", "alerts.csv": "alert_accounts", "cash_tx.csv": "other", "tx.csv": "transactions"}


def test_named_amlsim_dataset_from_a_tgz_like_the_official_sample(shared_data: Path, tmp_path: Path) -> None:
    run = shared_data / "amlsim" / "ibm_amlsim_sample_20K" / "20K_cycle200"
    archive = tmp_path / "20K_cycle200.tgz"
    with tarfile.open(archive, "w:gz") as bundle:
        for name in ("transactions.csv", "nodes.csv", "metadata.txt"):
            bundle.add(run / name, arcname=f"20K_cycle200/{name}")
    result = CliRunner().invoke(cli, ["--quiet", "prepare", "amlsim", "--raw", str(archive),
                                      "--out", str(tmp_path / "aml.zarr")])
    assert result.exit_code == 0, result.output
    store = open_store(tmp_path / "aml.zarr")
    assert (store.num_nodes, store.num_edges, store.num_snapshots) == (20_000, 117_805, 149)
    assert store.provenance["source"] == "amlsim" and store.provenance["raw"][0]["role"] == "archive"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["20K_cycle200.tgz", "aml.zarr"]  # unpack removed


# --------------------------------------------------------------------------- TGN/DyGLib processed layout

def prepared_events(path: Path) -> dict[str, np.ndarray]:
    assert validate_store(path) == []
    return open_store(path).events()


@pytest.mark.parametrize("folder, name, options", [
    ("jodie_lastfm", "lastfm.csv", {"drop_partial_last_line": True}),
    ("jodie_wikipedia_tgn", "wikipedia.csv", {})], ids=["lastfm", "wikipedia"])
def test_tgn_preprocessing_of_a_jodie_file_prepares_to_the_same_events(shared_data: Path, tmp_path: Path,
                                                                       folder: str, name: str, options) -> None:
    jodie_csv = shared_data / folder / name
    rows, features = read_jodie_rows(jodie_csv)
    processed = write_tgn_processed(rows, features, tmp_path / "data", Path(name).stem)
    jodie = build_file(out=tmp_path / "jodie.zarr", fmt="jodie", raw=jodie_csv, **options)
    tgn = build_file(out=tmp_path / "tgn.zarr", fmt="tgn", raw=processed)
    expected, got = prepared_events(jodie), prepared_events(tgn)
    assert sorted(got) == sorted(expected)
    for column in expected:
        assert np.array_equal(got[column], expected[column]), column
    jodie_store, tgn_store = open_store(jodie), open_store(tgn)
    assert tgn_store.num_nodes == jodie_store.num_nodes and tgn_store.num_events == len(rows)
    assert tgn_store.read("node_features").shape == (tgn_store.num_nodes, 172)
    assert [r["role"] for r in tgn_store.provenance["raw"]] == ["edges", "edge_features", "node_features"]


def test_jodie_format_given_a_tgn_processed_file_names_the_tgn_family(shared_data: Path, tmp_path: Path) -> None:
    rows, features = read_jodie_rows(shared_data / "jodie_wikipedia_tgn" / "wikipedia.csv", limit=500)
    processed = write_tgn_processed(rows, features, tmp_path / "data", "wikipedia")
    with pytest.raises(InputError, match=r"ml_wikipedia\.csv:1: header ',u,i,ts,label,idx' is TGN/DyGLib's "
                                         r"processed layout .* --format tgn"):
        build_file(out=tmp_path / "x.zarr", fmt="jodie", raw=processed)
    assert not (tmp_path / "x.zarr").exists()


# --------------------------------------------------------------------------- real files in other column orders

def reordered(source: Path, target: Path, order: tuple[int, ...]) -> Path:
    """``source``'s whitespace rows with their columns in ``order`` (0-based), space separated."""
    rows = [line.split() for line in source.read_text().splitlines() if line.strip() and line[0] not in "#%"]
    target.write_text("".join(" ".join(row[i] for i in order) + "\n" for row in rows))
    return target


def test_college_msg_written_time_first_is_refused_then_read_right_with_columns(shared_data: Path,
                                                                               tmp_path: Path) -> None:
    raw = reordered(shared_data / "snap_CollegeMsg" / "CollegeMsg.txt", tmp_path / "tij.txt", (2, 0, 1))
    with pytest.raises(InputError, match=r"tij\.txt: refused, looks misread: the time column steps backwards"):
        build_file(out=tmp_path / "x.zarr", fmt="snap", raw=raw, to="stream")
    store = open_store(build_file(out=tmp_path / "c.zarr", fmt="snap", raw=raw, to="stream", columns="2,3,1"))
    assert store.fingerprint == FINGERPRINTS["CollegeMsg stream"]


def test_enron_written_u_v_t_w_is_refused_then_read_right_with_columns(shared_data: Path, tmp_path: Path) -> None:
    source = shared_data / "networkrepository_dynamic" / "ia-enron-employees.edges"
    raw = reordered(source, tmp_path / "uvtw.edges", (0, 1, 3, 2))
    with pytest.raises(InputError, match=r"every one of the 50,572 events is at time 1: .*--columns"):
        build_file(out=tmp_path / "x.zarr", fmt="network-repository", raw=raw)
    store = open_store(build_file(out=tmp_path / "e.zarr", fmt="network-repository", raw=raw, columns="1,2,3,4"))
    assert store.fingerprint == FINGERPRINTS["ia-enron-employees"]
