"""Small files written in each published format, every oddity of the real files, and malformed input."""
from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from dgbench.cli import cli
from dgbench.errors import DgbenchError, InputError
from dgbench.store import open_store
from dgbench.store.validate import validate_store
from dgbench.loaders.parsing import FLOAT, ID, WHITESPACE, Column, TableSpec, read_table
from dgbench.loaders.prepare import build_file

DAY = 86400
T0 = 1_600_000_000


def write(path: Path, text: str, newline: str = "\n") -> Path:
    path.write_bytes(text.replace("\n", newline).encode())
    return path


def prepare(tmp_path: Path, fmt: str, raw: Path, name: str = "store.zarr", **options):
    path = build_file(out=tmp_path / name, fmt=fmt, raw=raw, **options)
    assert validate_store(path) == []
    return open_store(path)


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


# --------------------------------------------------------------------------- Network Repository

NR_TEXT = f"""% bip unweighted
% 6 4 4
1 10 5 {T0 + 3600}
2\t10 3\t{T0 + 100}
  3   20 1.5e+00  {T0 + DAY + 500}
1 10 2 {T0 + 2 * DAY + 200}
"""


def test_network_repository_comments_mixed_separators_crlf_out_of_order(tmp_path: Path) -> None:
    raw = write(tmp_path / "g.edges", NR_TEXT, newline="\r\n")
    store = prepare(tmp_path, "network-repository", raw, window="1d")
    assert store.num_snapshots == 3 and list(store.edges_per_snapshot()) == [2, 1, 1]
    first = store.snapshot(0)
    ids = store.node_ids()
    assert ids.tolist() == [1, 2, 3, 10, 20]
    # snapshot 0 sorted by (dst, src): 1->10 (w 5), 2->10 (w 3); times kept
    assert ids[first.src].tolist() == [1, 2] and ids[first.dst].tolist() == [10, 10]
    assert first.weight.tolist() == [5.0, 3.0] and first.time.tolist() == [T0 + 3600, T0 + 100]
    assert store.snapshot(1).weight.tolist() == [1.5]  # scientific notation
    assert store.provenance["rows_out_of_order"] == 1
    assert store.provenance["raw"][0]["sha256"] == __import__("hashlib").sha256(raw.read_bytes()).hexdigest()


def test_network_repository_comma_layout_without_final_newline(tmp_path: Path) -> None:
    raw = write(tmp_path / "g.edges", f"5,6,{T0}\n6,7,{T0 + 10}\n7,5,{T0 + 20}")
    store = prepare(tmp_path, "network-repository", raw, to="stream")
    events = store.events()
    assert store.num_events == 3 and events["t"].tolist() == [T0, T0 + 10, T0 + 20]
    assert store.node_ids()[events["src"]].tolist() == [5, 6, 7]


def test_network_repository_zip_archive(tmp_path: Path) -> None:
    archive = tmp_path / "soc-test-growth.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as bundle:
        bundle.writestr("readme.txt", "about this graph " * 1000)  # bigger than the .edges file
        bundle.writestr("soc-test-growth.edges", NR_TEXT)
    store = prepare(tmp_path, "network-repository", archive)
    assert store.num_edges == 4
    raw = store.provenance["raw"]
    assert [r["role"] for r in raw] == ["archive", "edges"] and raw[1]["name"] == "soc-test-growth.edges"
    assert store.provenance["raw_sha256"] == __import__("hashlib").sha256(archive.read_bytes()).hexdigest()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".dgbench-unpack")]  # unpack folder removed


def test_duplicates_keep_or_sum(tmp_path: Path) -> None:
    raw = write(tmp_path / "d.edges", f"1 2 1 {T0}\n1 2 4 {T0 + 5}\n2 1 1 {T0 + 6}\n1 2 2 {T0 + DAY}\n")
    kept = prepare(tmp_path, "network-repository", raw, name="keep.zarr", duplicates="keep")
    summed = prepare(tmp_path, "network-repository", raw, name="sum.zarr", duplicates="sum")
    assert kept.provenance["duplicates"] == summed.provenance["duplicates"] == 1
    assert list(kept.edges_per_snapshot()) == [3, 1] and list(summed.edges_per_snapshot()) == [2, 1]
    snap = summed.snapshot(0)  # (dst, src) order: 2->1 (dst id 1) then 1->2 (dst id 2)
    assert snap.weight.tolist() == [1.0, 5.0] and snap.time.tolist() == [T0 + 6, T0]
    assert kept.snapshot(0).weight.tolist() == [1.0, 1.0, 4.0]  # multi-edges kept in time order


@pytest.mark.parametrize("num_nodes", [50, 2**40])  # packed value sort, and the stable argsort fallback
def test_pair_order_is_the_stable_dst_src_order(num_nodes: int) -> None:
    from dgbench.loaders.stores import pair_order
    rng = np.random.default_rng(5)
    src, dst = rng.integers(0, 50, 5000), rng.integers(0, 50, 5000)
    order, key = pair_order(src, dst, num_nodes)
    assert np.array_equal(order, np.lexsort((src, dst)))  # lexsort is stable
    assert np.array_equal(key, dst[order] * num_nodes + src[order])


def test_sparse_huge_ids_are_relabelled(tmp_path: Path) -> None:
    big = [10**15, 7, 123_456_789_012, 2**62]
    lines = "".join(f"{big[i]} {big[(i + 1) % 4]} {T0 + i}\n" for i in range(4))
    store = prepare(tmp_path, "snap", write(tmp_path / "s.txt", lines), to="stream")
    assert store.node_ids().tolist() == sorted(big)
    events = store.events()
    assert store.node_ids()[events["src"]].tolist() == big and events["src"].dtype == np.int32


# --------------------------------------------------------------------------- KONECT / SNAP

def test_konect_sym_header_is_undirected_and_bip_is_bipartite(tmp_path: Path) -> None:
    sym = prepare(tmp_path, "konect", write(tmp_path / "out.a", f"% sym positive\n1 2 1\t{T0}\n"), name="a.zarr")
    assert not sym.directed and sym.attrs["bipartite"] is None
    bip = prepare(tmp_path, "konect", write(tmp_path / "out.b", f"% bip unweighted\n% 2 2 2\n1 1 1 {T0}\n2 1 1 {T0}\n"),
                  name="b.zarr")
    assert bip.attrs["bipartite"] == {"num_users": 2, "num_items": 1} and bip.num_nodes == 3


def test_konect_without_time_column_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not a dynamic graph"):
        build_file(out=tmp_path / "x.zarr", fmt="konect", raw=write(tmp_path / "out.x", "% asym\n1 2 1\n"))


def test_same_events_as_snap_konect_and_network_repository_fingerprint_equal(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    src, dst = rng.integers(1, 50, 300), rng.integers(1, 50, 300)
    t = np.sort(rng.integers(T0, T0 + 10 * DAY, 300))
    snap = "# SNAP temporal\n" + "".join(f"{a} {b} {c}\n" for a, b, c in zip(src, dst, t))
    konect = "% asym unweighted\n" + "".join(f"{a + 1000} {b + 1000} 1\t{c}\n" for a, b, c in zip(src, dst, t))
    nr = "".join(f"{a * 7},{b * 7},{c}\n" for a, b, c in zip(src, dst, t))
    stores = [prepare(tmp_path, "snap", write(tmp_path / "a.txt", snap), name="a.zarr", to="stream"),
              prepare(tmp_path, "konect", write(tmp_path / "out.b", konect), name="b.zarr", to="stream"),
              prepare(tmp_path, "network-repository", write(tmp_path / "c.edges", nr), name="c.zarr", to="stream")]
    # KONECT's weight column becomes a 1-dim edge feature in a stream; drop it for the comparison
    assert stores[0].fingerprint == stores[2].fingerprint
    assert stores[1].has("edge_features")
    as_snapshots = [prepare(tmp_path, "snap", tmp_path / "a.txt", name="d.zarr"),
                    prepare(tmp_path, "network-repository", tmp_path / "c.edges", name="e.zarr")]
    assert as_snapshots[0].fingerprint == as_snapshots[1].fingerprint
    assert not np.array_equal(stores[0].node_ids(), stores[2].node_ids())  # ids differ, graph does not


def test_konect_and_snap_same_events_same_snapshot_fingerprint(tmp_path: Path) -> None:
    lines = [(3, 9, T0), (9, 3, T0 + 50), (4, 3, T0 + DAY + 1)]
    snap = write(tmp_path / "e.txt", "".join(f"{a} {b} {t}\n" for a, b, t in lines))
    konect = write(tmp_path / "out.e", "% asym\n" + "".join(f"{a} {b} 1 {t}\n" for a, b, t in lines))
    a = prepare(tmp_path, "snap", snap, name="a.zarr", duplicates="sum")
    b = prepare(tmp_path, "konect", konect, name="b.zarr", duplicates="sum")
    assert a.fingerprint == b.fingerprint  # sum gives weight = multiplicity = KONECT's weight 1


# --------------------------------------------------------------------------- JODIE

JODIE_HEADER = "user_id,item_id,timestamp,state_label,comma_separated_list_of_features\n"


def jodie_rows(rows: list[tuple]) -> str:
    return "".join(",".join(str(v) for v in row) + "\n" for row in rows)


def test_jodie_features_labels_bipartite_renamed_header_crlf(tmp_path: Path) -> None:
    rows = [(0, 0, 0.0, 0, 0.5, 1.0), (1, 0, 10.0, 1, -0.5, 2.0), (0, 2, 5.0, 0, 0.25, 3.0)]
    raw = write(tmp_path / "j.csv", "source,destination,timestamp,state_label,features\n" + jodie_rows(rows), "\r\n")
    store = prepare(tmp_path, "jodie", raw)
    events = store.events()
    assert store.attrs["bipartite"] == {"num_users": 2, "num_items": 2}
    assert events["t"].tolist() == [0, 5, 10] and store.provenance["rows_out_of_order"] == 1
    assert events["edge_features"].tolist() == [[0.5, 1.0], [0.25, 3.0], [-0.5, 2.0]]
    assert events["label"].tolist() == [0, 0, 1]
    assert events["dst"].tolist() == [2, 3, 2]  # items 0, 2 -> 2, 3 after the two users


def test_jodie_truncated_last_line(tmp_path: Path) -> None:
    raw = write(tmp_path / "cut.csv", JODIE_HEADER + jodie_rows([(0, 0, 1.0, 0, 0.0), (1, 1, 2.0, 0, 0.0)]) + "1,2,3")
    with pytest.raises(InputError, match=r"cut\.csv:4: the file ends mid-line"):
        build_file(out=tmp_path / "x.zarr", fmt="jodie", raw=raw)
    store = prepare(tmp_path, "jodie", raw, drop_partial_last_line=True)
    assert store.num_events == 2 and store.provenance["rows_dropped"] == 1


# --------------------------------------------------------------------------- TGL

def write_tgl(folder: Path, rows: list[tuple], edge_dim: int = 3, nodes: int = 6) -> torch.Tensor:
    folder.mkdir()
    text = ",src,dst,time,int_roll,ext_roll\n" + "".join(
        f"{i},{s},{d},{t},{r},{r}\n" for i, (s, d, t, r) in enumerate(rows))
    (folder / "edges.csv").write_text(text)
    features = torch.arange(len(rows) * edge_dim, dtype=torch.float32).reshape(len(rows), edge_dim)
    torch.save(features, folder / "edge_features.pt")
    torch.save(torch.eye(nodes), folder / "node_features.pt")
    return features


def test_tgl_gdelt_like_folder_with_pt_features_and_ext_roll(tmp_path: Path) -> None:
    rows = [(0, 1, 0.0, 0), (2, 3, 30.0, 0), (1, 2, 15.0, 0), (3, 0, 45.0, 1), (4, 1, 60.0, 2), (1, 0, 75.0, 2)]
    features = write_tgl(tmp_path / "GDELT", rows)
    store = prepare(tmp_path, "tgl", tmp_path / "GDELT")
    events = store.events()
    order = np.argsort([r[2] for r in rows], kind="stable")
    assert events["t"].tolist() == [0, 15, 30, 45, 60, 75]
    assert np.array_equal(events["edge_features"], features.numpy()[order])  # features follow the time sort
    assert store.split_ranges() == {"train": (0, 3), "val": (3, 4), "test": (4, 6)}
    assert store.split["method"] == "tgl-ext_roll"
    assert store.num_nodes == 6 and np.array_equal(store.read("node_features"), np.eye(6, dtype=np.float32))
    roles = {r["role"] for r in store.provenance["raw"]}
    assert roles == {"edges", "edge_features", "node_features"}


def test_tgl_to_snapshots_records_dropped_features(tmp_path: Path) -> None:
    write_tgl(tmp_path / "T", [(0, 1, 0.0, 0), (1, 0, DAY + 1.0, 1), (1, 2, 2 * DAY + 1.0, 2)])
    store = prepare(tmp_path, "tgl", tmp_path / "T", to="snapshots")
    assert store.num_snapshots == 3 and not store.has("edge_features") and not store.has("node_features")
    assert store.provenance["dropped_arrays"] == ["edge_features", "node_features"]


def test_tgl_feature_rows_must_match_edges(tmp_path: Path) -> None:
    write_tgl(tmp_path / "T", [(0, 1, 0.0, 0), (1, 0, 1.0, 0)])
    torch.save(torch.zeros(3, 2), tmp_path / "T" / "edge_features.pt")
    with pytest.raises(InputError, match="3 edge feature rows for 2 edges"):
        build_file(out=tmp_path / "x.zarr", fmt="tgl", raw=tmp_path / "T")


class NotATensor:
    """Unpickling this would run code a weights-only load refuses."""

    def __reduce__(self):
        return (print, ("pickle code ran",))


def test_tgl_pt_files_are_never_fully_unpickled(tmp_path: Path, capsys) -> None:
    write_tgl(tmp_path / "T", [(0, 1, 0.0, 0), (1, 0, 1.0, 0)])
    torch.save({"x": NotATensor()}, tmp_path / "T" / "edge_features.pt")
    with pytest.raises(InputError, match="not a weights-only torch tensor file"):
        build_file(out=tmp_path / "x.zarr", fmt="tgl", raw=tmp_path / "T")
    assert "pickle code ran" not in capsys.readouterr().out


def test_jodie_and_tgl_same_events_same_fingerprint(tmp_path: Path) -> None:
    rows = [(0, 0, 1.0), (1, 1, 2.0), (0, 1, 3.0), (2, 0, 4.0)]
    jodie = write(tmp_path / "j.csv", "u,i,ts\n" + jodie_rows(rows))
    tgl = tmp_path / "tgl"
    tgl.mkdir()
    write(tgl / "edges.csv", ",src,dst,time\n" + "".join(f"{k},{u},{i + 3},{t}\n" for k, (u, i, t) in enumerate(rows)))
    a = prepare(tmp_path, "jodie", jodie, name="a.zarr")
    b = prepare(tmp_path, "tgl", tgl, name="b.zarr", bipartite=True)
    assert a.fingerprint == b.fingerprint


# --------------------------------------------------------------------------- AMLSim layouts

def test_amlsim_convert_logs_layout_iso_dates_sar_labels(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    write(folder / "transactions.csv",
          "tran_id,orig_acct,bene_acct,tx_type,base_amt,tran_timestamp,is_sar,alert_id\n"
          "1,100,200,TRANSFER,1.5e3,2017-01-02T00:00:00Z,False,-1\n"
          "2,200,300,TRANSFER,20.0,2017-01-01T12:00:00Z,True,7\n"
          "3,300,100,TRANSFER,7,2017-01-03T06:00:00Z,True,7\n")
    write(folder / "accounts.csv", "acct_id,dsply_nm,type\n100,a,I\n200,b,I\n300,c,I\n400,d,I\n")
    store = prepare(tmp_path, "amlsim", folder)
    assert store.num_nodes == 4 and store.num_snapshots == 2  # 400 never transacts but is an account
    first = store.snapshot(0)  # days from the first event (Jan 1 12:00): Jan 2 00:00 is still day 0
    assert first.weight.tolist() == [1500.0, 20.0] and first.label.tolist() == [0, 1]
    assert store.snapshot(1).weight.tolist() == [7.0] and store.snapshot(1).label.tolist() == [1]
    assert store.provenance["rows_out_of_order"] == 1 and store.attrs["cut"]["window_seconds"] == DAY


def test_amlsim_10k_example_layout_integer_steps(tmp_path: Path) -> None:
    raw = write(tmp_path / "transactions.csv",
                "TX_ID,SENDER_ACCOUNT_ID,RECEIVER_ACCOUNT_ID,TX_TYPE,TX_AMOUNT,TIMESTAMP,IS_FRAUD,ALERT_ID\n"
                "1,5,6,TRANSFER,10.5,0,False,-1\n2,6,7,TRANSFER,3.25,0,True,2\n3,7,5,TRANSFER,1e2,2,True,2\n")
    store = prepare(tmp_path, "amlsim", raw)
    assert store.num_snapshots == 3 and list(store.edges_per_snapshot()) == [2, 0, 1]
    assert store.snapshot(2).weight.tolist() == [100.0] and store.read("label").sum() == 2
    assert store.attrs["cut"]["window_steps"] == 1


def test_amlsim_transaction_outside_accounts_is_an_error(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    write(folder / "transactions.csv", "sourceNodeId,targetNodeId,value,time\n0,1,5.0,1\n0,9,1.0,2\n")
    write(folder / "nodes.csv", "nodeid,isFraud,init_balance,fraudStep\n0,0,1.0,-1\n1,1,1.0,3\n")
    with pytest.raises(InputError, match="vertex id 9 is not in the known vertex set"):
        build_file(out=tmp_path / "x.zarr", fmt="amlsim", raw=folder)


# --------------------------------------------------------------------------- malformed input

@pytest.mark.parametrize("text, line, field, problem", [
    (f"1 2 {T0}\n1 x {T0}\n", 2, "dst", "'x' is not an integer"),
    (f"1 2 {T0}\n3 4 {T0}\n5 6\n7 8 {T0}\n", 3, "t", "missing: expected 3 fields"),
    (f"1 2 {T0}\n3 x {T0}", 2, "dst", "'x' is not an integer"),  # a whole last row without newline: not cut off
    (f"1 2 {T0}\n3 4 nan\n", 2, "t", "'nan' is not a finite time"),
    (f"1 2 {T0}\n# a comment\n-3 4 {T0}\n", 3, "src", "negative id -3"),
    (f"1 2 {T0}\n% 3 4\n", 2, "src", "'%' is not an integer"),
    (f"1 2 {T0}\n1 2 3 4 5\n", 2, None, "expected 3 fields"),
])
def test_malformed_rows_name_file_line_field(tmp_path: Path, text: str, line: int, field: str | None,
                                             problem: str) -> None:
    raw = write(tmp_path / "bad.txt", text)
    with pytest.raises(InputError) as caught:
        build_file(out=tmp_path / "x.zarr", fmt="snap", raw=raw)
    error = caught.value
    assert (error.file, error.line, error.field) == (str(raw), line, field) and problem in str(error)
    assert "\n" not in str(error)
    assert not (tmp_path / "x.zarr").exists() and leftovers(tmp_path) == []


def test_missing_value_in_csv_format(tmp_path: Path) -> None:
    raw = write(tmp_path / "j.csv", JODIE_HEADER + "0,0,1.0,0\n1,,2.0,0\n")
    with pytest.raises(InputError, match=r"j\.csv:3: field 'item_id': missing value"):  # the file's own name
        build_file(out=tmp_path / "x.zarr", fmt="jodie", raw=raw)


def test_errors_name_fields_as_the_header_does(tmp_path: Path) -> None:
    raw = write(tmp_path / "tx.csv", "TX_ID,SENDER_ACCOUNT_ID,RECEIVER_ACCOUNT_ID,TX_TYPE,TX_AMOUNT,TIMESTAMP,"
                                     "IS_FRAUD,ALERT_ID\n1,0,1,T,5.0,1,False,-1\n2,0,1,T,5.0,2,maybe,-1\n")
    with pytest.raises(InputError, match=r"tx\.csv:3: field 'IS_FRAUD': 'maybe' is not a true/false flag"):
        build_file(out=tmp_path / "x.zarr", fmt="amlsim", raw=raw)


def test_error_lines_are_exact_across_blocks(tmp_path: Path) -> None:
    lines = ["% header"] + [f"{i} {i + 1}\t{T0 + i}" for i in range(500)]
    lines[377] = "12 oops 5"
    raw = write(tmp_path / "g.txt", "\n".join(lines) + "\n")
    spec = TableSpec((Column("src", ID, nonnegative=True), Column("dst", ID, nonnegative=True),
                      Column("t", FLOAT, finite=True)), delimiter=WHITESPACE, comments=b"%")
    with pytest.raises(InputError) as caught:
        read_table(raw, spec, block_bytes=97)  # many small blocks
    assert (caught.value.line, caught.value.field) == (378, "dst")
    lines[377] = f"12 13 {T0}"
    write(raw, "\n".join(lines) + "\n")
    table = read_table(raw, spec, block_bytes=97)
    assert table.rows == 500 and table.columns["src"][377 - 1] == 12


def test_cli_reports_one_line_and_exit_1(tmp_path: Path) -> None:
    raw = write(tmp_path / "bad.edges", f"1 2 {T0}\n1 2 x\n")
    result = CliRunner().invoke(cli, ["--quiet", "prepare", "file", "--format", "network-repository", "--raw",
                                      str(raw), "--out", str(tmp_path / "x.zarr")])
    assert result.exit_code == 1
    assert result.output.strip().count("\n") == 0 and "bad.edges:2: field 't'" in result.output


def test_cli_prepare_file_writes_a_store(tmp_path: Path) -> None:
    raw = write(tmp_path / "g.edges", NR_TEXT)
    result = CliRunner().invoke(cli, ["--quiet", "prepare", "file", "--format", "network-repository", "--raw",
                                      str(raw), "--to", "snapshots", "--window", "12h",
                                      "--out", str(tmp_path / "g.zarr")])
    assert result.exit_code == 0, result.output
    assert open_store(tmp_path / "g.zarr").attrs["cut"]["window_seconds"] == 12 * 3600


def test_sum_on_a_stream_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DgbenchError, match="a stream keeps every event"):
        build_file(out=tmp_path / "x.zarr", fmt="snap", raw=write(tmp_path / "s.txt", f"1 2 {T0}\n"),
                   to="stream", duplicates="sum")


def test_named_network_repository_dataset_with_raw_zip(tmp_path: Path) -> None:
    archive = tmp_path / "rec-epinions-user-ratings.zip"
    with zipfile.ZipFile(archive, "w") as bundle:
        bundle.writestr("rec-epinions-user-ratings.edges", NR_TEXT)
    result = CliRunner().invoke(cli, ["--quiet", "prepare", "epinions", "--raw", str(archive),
                                      "--out", str(tmp_path / "e.zarr")])
    assert result.exit_code == 0, result.output
    store = open_store(tmp_path / "e.zarr")
    assert store.kind == "snapshots" and store.num_snapshots == 3 and store.provenance["source"] == "epinions"
    assert store.attrs["cut"]["window_seconds"] == DAY


def test_named_lastfm_accepts_tgl_folder(tmp_path: Path) -> None:
    write_tgl(tmp_path / "LASTFM", [(0, 3, 0.0, 0), (1, 4, 5.0, 1), (2, 3, 9.0, 2)])
    result = CliRunner().invoke(cli, ["--quiet", "prepare", "lastfm", "--raw", str(tmp_path / "LASTFM"),
                                      "--out", str(tmp_path / "l.zarr")])
    assert result.exit_code == 0, result.output
    store = open_store(tmp_path / "l.zarr")
    assert store.provenance["format"] == "tgl" and store.split["method"] == "tgl-ext_roll"


def test_out_of_order_rows_are_reported_on_stderr(tmp_path: Path) -> None:
    raw = write(tmp_path / "o.txt", f"1 2 {T0 + 5}\n2 3 {T0}\n")
    result = CliRunner().invoke(cli, ["prepare", "file", "--format", "snap", "--raw", str(raw),
                                      "--out", str(tmp_path / "o.zarr")])
    assert result.exit_code == 0, result.output
    assert "note: o.txt: 1 rows were out of time order (sorted stably)" in result.stderr


def test_tiny_blocks_bom_and_long_lines_hash_every_byte_once(tmp_path: Path) -> None:
    body = "".join(f"{i} {i * 7919} {T0 + i}\n" for i in range(40))
    raw = tmp_path / "bom.txt"
    raw.write_bytes(b"\xef\xbb\xbf" + body.encode())
    spec = TableSpec((Column("src", ID, nonnegative=True), Column("dst", ID, nonnegative=True),
                      Column("t", FLOAT, finite=True)), delimiter=WHITESPACE)
    table = read_table(raw, spec, block_bytes=4)  # every line is longer than a block: blocks grow
    assert table.rows == 40 and table.columns["dst"].tolist() == [i * 7919 for i in range(40)]
    assert table.sha256 == __import__("hashlib").sha256(raw.read_bytes()).hexdigest()


@pytest.mark.parametrize("fmt, text, message", [
    ("snap", "# only a comment\n", "no data rows"),
    ("jodie", JODIE_HEADER, "no data rows"),
    ("network-repository", "", "no data rows"),
])
def test_empty_files_are_one_line_errors(tmp_path: Path, fmt: str, text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        build_file(out=tmp_path / "x.zarr", fmt=fmt, raw=write(tmp_path / "empty.txt", text))
