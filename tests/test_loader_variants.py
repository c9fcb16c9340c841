"""Every variant docs/loader-formats.md lists, each as a generated file of exactly that shape.

Edge lists: one set of events written with each separator, header and column order a family is
published with must prepare to the same store (fingerprint) as its plain form. AMLSim: folders of
each generation, with files told apart by their columns. Encodings: UTF-16/UTF-32 files prepare as
their UTF-8 twin does. Errors: one line, values cut.
"""
from __future__ import annotations

import hashlib
import zipfile
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from dgbench.cli import cli
from dgbench.errors import DgbenchError, InputError
from dgbench.store import open_store
from dgbench.store.validate import validate_store
from dgbench.loaders.parsing import SHOWN_CHARS
from dgbench.loaders.prepare import build_file
from tests.tgn_preprocessing import write_tgn_processed

T0 = 1_600_000_000
DAY = 86400
# (src, dst, rating, time): a signed, rated, timestamped edge list like SNAP's soc-sign-bitcoin-alpha
ROWS = [(7188, 1, 10, T0), (430, 1, 10, T0 + 3600), (3134, 1, 10, T0 + DAY), (3026, 1, -2, T0 + DAY + 5),
        (3010, 1, 4, T0 + 2 * DAY), (804, 1, 10, T0 + 3 * DAY)]


def write_bytes(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def rows_text(separator: str, columns: tuple[int, ...] = (0, 1, 2, 3), header: str | None = None,
              comment: str = "") -> str:
    body = "".join(separator.join(str(row[c]) for c in columns) + "\n" for row in ROWS)
    return comment + (header + "\n" if header else "") + body


def prepare(tmp_path: Path, fmt: str, raw: Path, name: str, **options):
    path = build_file(out=tmp_path / name, fmt=fmt, raw=raw, **options)
    assert validate_store(path) == []
    return open_store(path)


# --------------------------------------------------------------------------- edge-list separators and headers

EDGE_VARIANTS = {
    # family: (plain form, [(variant name, text)])
    "snap": (rows_text(" ", (0, 1, 3)), [
        ("tab", rows_text("\t", (0, 1, 3))),
        ("comment lines", rows_text(" ", (0, 1, 3), comment="# Directed graph\n# SRC DST UNIXTS\n")),
        ("comma", rows_text(",", (0, 1, 3))),
        ("semicolon", rows_text(";", (0, 1, 3))),
        ("comma and spaces", rows_text(", ", (0, 1, 3))),
        ("header", rows_text(",", (0, 1, 3), header="SOURCE,TARGET,TIME")),
        ("reordered header", rows_text(",", (3, 1, 0), header="TIME,TARGET,SOURCE")),
    ]),
    "network-repository": (rows_text(" ", (0, 1, 2, 3)), [
        ("comma", rows_text(",", (0, 1, 2, 3))),
        ("tab", rows_text("\t", (0, 1, 2, 3))),
        ("semicolon", rows_text(";", (0, 1, 2, 3))),
        ("% comments", rows_text(" ", (0, 1, 2, 3), comment="% asym positive\n% 6 7 1\n")),
        ("mixed spaces and tabs", rows_text(" \t ", (0, 1, 2, 3))),
        ("header", rows_text("\t", (0, 1, 2, 3), header="u\tv\tweight\tt")),
    ]),
    "konect": ("% asym positive\n" + rows_text(" ", (0, 1, 2, 3)), [
        ("tab before time", "% asym positive\n" + "".join(f"{a} {b} {w}\t{t}\n" for a, b, w, t in ROWS)),
        ("tabs", "% asym positive\n" + rows_text("\t", (0, 1, 2, 3))),
        ("comma", "% asym positive\n" + rows_text(",", (0, 1, 2, 3))),
    ]),
}


@pytest.mark.parametrize("family, variant", [(f, name) for f, (_, variants) in EDGE_VARIANTS.items()
                                             for name, _ in variants])
def test_edge_list_variants_prepare_to_the_plain_store(tmp_path: Path, family: str, variant: str) -> None:
    plain, variants = EDGE_VARIANTS[family]
    text = dict(variants)[variant]
    reference = prepare(tmp_path, family, write_bytes(tmp_path / "plain.txt", plain.encode()), "plain.zarr")
    store = prepare(tmp_path, family, write_bytes(tmp_path / "variant.txt", text.encode()), "variant.zarr")
    assert store.fingerprint == reference.fingerprint
    assert store.num_edges == len(ROWS) and store.num_snapshots == 4


def test_snap_signed_network_csv_without_header(tmp_path: Path) -> None:
    """soc-sign-bitcoinalpha.csv: SOURCE,TARGET,RATING,TIME, comma separated, no header (issue 18)."""
    raw = write_bytes(tmp_path / "soc-sign-bitcoinalpha.csv", rows_text(",").encode())
    store = prepare(tmp_path, "snap", raw, "b.zarr")
    assert store.num_edges == 6 and store.num_snapshots == 4
    assert sorted(store.read("weight").tolist()) == sorted(float(r[2]) for r in ROWS)
    details = store.provenance["format_details"]
    assert details["delimiter"] == "comma" and details["layout"] == ["src", "dst", "weight", "t"]


def test_snap_bitcoin_otc_fractional_times_are_kept(tmp_path: Path) -> None:
    """soc-sign-bitcoinotc.csv stamps times with fractions of a second ("1289241911.72836")."""
    raw = write_bytes(tmp_path / "otc.csv",
                      b"6,2,4,1289241911.72836\n6,5,2,1289241941.53378\n1,15,1,1289243140.39049\n")
    events = prepare(tmp_path, "snap", raw, "o.zarr", to="stream").events()
    assert events["t"].tolist() == pytest.approx([1289241911.72836, 1289241941.53378, 1289243140.39049])


def test_header_without_role_names_is_positional_and_recorded(tmp_path: Path) -> None:
    raw = write_bytes(tmp_path / "h.csv", rows_text(",", header="a,b,c,d").encode())
    store = prepare(tmp_path, "network-repository", raw, "h.zarr")
    assert store.num_edges == 6 and store.provenance["format_details"]["header"] == "a,b,c,d"


def test_a_malformed_first_row_is_not_taken_for_a_header(tmp_path: Path) -> None:
    raw = write_bytes(tmp_path / "bad.txt", f"1 x {T0}\n2 3 {T0}\n".encode())
    with pytest.raises(InputError, match=r"bad\.txt:1: field 'dst': 'x' is not an integer"):
        build_file(out=tmp_path / "x.zarr", fmt="snap", raw=raw)


# --------------------------------------------------------------------------- encodings

ENCODINGS = [
    ("utf-16 LE with BOM", lambda text: b"\xff\xfe" + text.encode("utf-16-le"), "UTF-16 LE with byte-order mark"),
    ("utf-16 BE with BOM", lambda text: b"\xfe\xff" + text.encode("utf-16-be"), "UTF-16 BE with byte-order mark"),
    ("utf-16 LE without BOM", lambda text: text.encode("utf-16-le"), "UTF-16 LE without byte-order mark"),
    ("utf-16 BE without BOM", lambda text: text.encode("utf-16-be"), "UTF-16 BE without byte-order mark"),
    ("utf-32 LE with BOM", lambda text: b"\xff\xfe\x00\x00" + text.encode("utf-32-le"),
     "UTF-32 LE with byte-order mark"),
]


@pytest.mark.parametrize("name, encode, label", ENCODINGS, ids=[e[0] for e in ENCODINGS])
def test_utf16_and_utf32_files_prepare_as_their_utf8_twin(tmp_path: Path, name: str, encode, label: str) -> None:
    text = "% asym positive\r\n" + rows_text("\t").replace("\n", "\r\n")  # as Windows tools write it
    reference = prepare(tmp_path, "konect", write_bytes(tmp_path / "out.utf8", text.encode()), "a.zarr")
    raw = write_bytes(tmp_path / "out.wide", encode(text))
    store = prepare(tmp_path, "konect", raw, "b.zarr")
    assert store.fingerprint == reference.fingerprint and store.directed
    assert store.provenance["format_details"]["encoding"] == label
    recorded = store.provenance["raw"][0]
    assert recorded["sha256"] == hashlib.sha256(raw.read_bytes()).hexdigest()  # the file's own bytes
    assert recorded["bytes"] == raw.stat().st_size


def test_utf16_csv_formats_read_too(tmp_path: Path) -> None:
    text = "user_id,item_id,timestamp,state_label\n0,0,1.0,0\n1,0,2.0,1\n"
    store = prepare(tmp_path, "jodie", write_bytes(tmp_path / "j.csv", b"\xff\xfe" + text.encode("utf-16-le")),
                    "j.zarr")
    assert store.num_events == 2 and store.events()["label"].tolist() == [0, 1]


def test_an_error_in_a_utf16_file_names_the_file_line_and_encoding(tmp_path: Path) -> None:
    raw = write_bytes(tmp_path / "wide.txt", f"1 2 {T0}\n3 x {T0}\n".encode("utf-16-le"))
    with pytest.raises(InputError) as caught:
        build_file(out=tmp_path / "x.zarr", fmt="snap", raw=raw)
    error = caught.value
    assert (error.file, error.line, error.field) == (str(raw), 2, "dst")
    assert "'x' is not an integer (decoded from UTF-16 LE without byte-order mark)" in str(error)
    assert "\x00" not in str(error)


def test_a_binary_file_is_refused_as_not_text(tmp_path: Path) -> None:
    raw = write_bytes(tmp_path / "blob.edges", b"1 2 3\n\x00\x13\x00\x00\x00\xff 5 6\n" * 8)
    with pytest.raises(InputError, match=r"blob\.edges: not a text file: NUL byte at offset 6"):
        build_file(out=tmp_path / "x.zarr", fmt="network-repository", raw=raw)


# --------------------------------------------------------------------------- long values in errors

def test_a_huge_field_is_cut_in_the_one_line_error(tmp_path: Path) -> None:
    huge = "9" * 100 + "x" * 2_000_000
    raw = write_bytes(tmp_path / "huge.txt", f"1 2 {T0}\n3 4 {huge}\n".encode())
    with pytest.raises(InputError) as caught:
        build_file(out=tmp_path / "x.zarr", fmt="snap", raw=raw)
    message = str(caught.value)
    assert len(message) < 3 * SHOWN_CHARS and "(2,000,100 characters)" in message
    assert message.startswith(f"{raw}:2: field 't': '999")
    result = CliRunner().invoke(cli, ["prepare", "file", "--format", "snap", "--raw", str(raw),
                                      "--out", str(tmp_path / "y.zarr"), "--quiet"])
    assert result.exit_code == 1 and len(result.stderr) < 3 * SHOWN_CHARS + 100
    assert result.stderr.count("\n") == 1


def test_a_huge_header_is_cut_in_the_error(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "transactions.csv").write_text("sourceNodeId,targetNodeId,value," + "y" * 100_000 + "\n1,2,3.0,4\n")
    with pytest.raises(InputError) as caught:
        build_file(out=tmp_path / "x.zarr", fmt="amlsim", raw=folder)
    assert len(str(caught.value)) < 1000


def test_the_cli_cuts_any_overlong_message() -> None:
    from dgbench.cli import _one_line
    from dgbench.errors import DgbenchError
    message = _one_line(DgbenchError("bad: " + "z" * 50_000 + "\nsecond line"))
    assert len(message) < 1200 and "\n" not in message and "50,017 characters" in message


# --------------------------------------------------------------------------- AMLSim generations

ACCOUNTS_10K = ("ACCOUNT_ID,CUSTOMER_ID,INIT_BALANCE,COUNTRY,ACCOUNT_TYPE,IS_FRAUD,TX_BEHAVIOR_ID\n"
                "0,C_0,184.44,US,I,false,1\n1,C_1,175.80,US,I,false,1\n4282,C_4282,12500.00,US,B,true,7\n"
                "5009,C_5009,3200.75,US,B,true,7\n77,C_77,10.00,US,I,false,1\n")
TRANSACTIONS_10K = ("TX_ID,SENDER_ACCOUNT_ID,RECEIVER_ACCOUNT_ID,TX_TYPE,TX_AMOUNT,TIMESTAMP,IS_FRAUD,ALERT_ID\n"
                    "1,0,1,TRANSFER,465.05,0,False,-1\n2,1,0,TRANSFER,564.64,0,False,-1\n"
                    "3,4282,5009,TRANSFER,570258.25,1,True,1\n4,5009,4282,TRANSFER,839527.25,2,True,1\n")
ALERTS_10K = ("ALERT_ID,ALERT_TYPE,IS_FRAUD,TX_ID,SENDER_ACCOUNT_ID,RECEIVER_ACCOUNT_ID,TX_TYPE,TX_AMOUNT,TIMESTAMP\n"
              "1,cycle,True,3,4282,5009,TRANSFER,570258.25,1\n1,cycle,True,4,5009,4282,TRANSFER,839527.25,2\n")


def folder_of(tmp_path: Path, files: dict[str, str], name: str = "run") -> Path:
    folder = tmp_path / name
    folder.mkdir(parents=True)
    for file, text in files.items():
        (folder / file).parent.mkdir(parents=True, exist_ok=True)
        (folder / file).write_text(text)
    return folder


def labelled_accounts(store) -> set[int]:
    return set(store.node_ids()[store.read("node_label") == 1].tolist())


def test_amlsim_10k_example_folder_with_transaction_level_alerts(tmp_path: Path) -> None:
    folder = folder_of(tmp_path, {"accounts.csv": ACCOUNTS_10K, "transactions.csv": TRANSACTIONS_10K,
                                  "alerts.csv": ALERTS_10K})
    store = prepare(tmp_path, "amlsim", folder, "aml.zarr")
    assert store.num_nodes == 5 and store.num_edges == 4 and store.num_snapshots == 3  # 77 never transacts
    assert labelled_accounts(store) == {4282, 5009}
    assert int(store.read("label").sum()) == 2
    details = store.provenance["format_details"]
    assert details["files"] == {"accounts.csv": "accounts", "alerts.csv": "alert_transactions",
                                "transactions.csv": "transactions"}


def test_amlsim_files_are_known_by_their_columns_not_their_names(tmp_path: Path) -> None:
    named = prepare(tmp_path, "amlsim", folder_of(tmp_path, {"accounts.csv": ACCOUNTS_10K,
                                                             "transactions.csv": TRANSACTIONS_10K}), "a.zarr")
    renamed = folder_of(tmp_path, {"acct_10k.csv": ACCOUNTS_10K, "sim/tx_10k_export.csv": TRANSACTIONS_10K,
                                   "sim/acct_list.csv": ACCOUNTS_10K}, name="renamed")
    (renamed / "acct_10k.csv").unlink()
    store = prepare(tmp_path, "amlsim", renamed, "b.zarr")
    assert store.fingerprint == named.fingerprint


def test_amlsim_edge_labels_from_a_transaction_level_alert_list(tmp_path: Path) -> None:
    """convert_logs: transactions without a flag; alert_transactions.csv says which are SAR."""
    transactions = ("tran_id,orig_acct,bene_acct,tx_type,base_amt,tran_timestamp,alert_id\n"
                    "10,1,2,TRANSFER,5.0,2017-01-01T00:00:00Z,-1\n11,2,3,TRANSFER,6.0,2017-01-01T01:00:00Z,4\n"
                    "12,3,1,TRANSFER,7.0,2017-01-02T01:00:00Z,5\n")
    alert_tx = ("alert_id,alert_type,is_sar,tran_id,orig_acct,bene_acct,tx_type,base_amt,tran_timestamp\n"
                "4,fan_in,True,11,2,3,TRANSFER,6.0,2017-01-01T01:00:00Z\n"
                "5,cycle,False,12,3,1,TRANSFER,7.0,2017-01-02T01:00:00Z\n")
    accounts = "acct_id,dsply_nm,type,prior_sar_count\n1,a,I,False\n2,b,I,False\n3,c,I,False\n"
    alert_members = "alert_id,alert_type,acct_id,acct_name,is_subject\n4,fan_in,2,b,True\n5,cycle,3,c,True\n"
    sar_accounts = ("ALERT_ID,ACCOUNT_ID,CUSTOMER_ID,EVENT_DATE,ALERT_TYPE,ACCOUNT_TYPE,IS_SAR\n"
                    "4,2,C_2,20170101,fan_in,I,True\n")
    folder = folder_of(tmp_path, {"transactions.csv": transactions, "alert_transactions.csv": alert_tx,
                                  "accounts.csv": accounts, "alert_accounts.csv": alert_members,
                                  "sar_accounts.csv": sar_accounts})
    store = prepare(tmp_path, "amlsim", folder, "c.zarr", to="stream")
    assert store.events()["label"].tolist() == [0, 1, 0]  # only the SAR alert's transaction
    assert labelled_accounts(store) == {2}  # sar_accounts' flag wins over the flagless member list
    roles = {r["name"]: r["role"] for r in store.provenance["raw"]}
    assert roles["alert_transactions.csv"] == "alert_transactions" and roles["sar_accounts.csv"] == "alerts"
    assert "alert_accounts.csv" not in roles


def test_amlsim_semicolon_separated_folder(tmp_path: Path) -> None:
    comma = prepare(tmp_path, "amlsim", folder_of(tmp_path, {"accounts.csv": ACCOUNTS_10K,
                                                             "transactions.csv": TRANSACTIONS_10K}), "a.zarr")
    semicolon = folder_of(tmp_path, {"accounts.csv": ACCOUNTS_10K.replace(",", ";"),
                                     "transactions.csv": TRANSACTIONS_10K.replace(",", ";")}, name="semi")
    assert prepare(tmp_path, "amlsim", semicolon, "b.zarr").fingerprint == comma.fingerprint


def test_amlsim_account_list_given_as_raw_is_named_as_such(tmp_path: Path) -> None:
    folder = folder_of(tmp_path, {"accounts.csv": ACCOUNTS_10K, "transactions.csv": TRANSACTIONS_10K})
    with pytest.raises(InputError, match="not an AMLSim transactions file: .* make it an account list"):
        build_file(out=tmp_path / "x.zarr", fmt="amlsim", raw=folder / "accounts.csv")


def test_amlsim_folder_without_transactions_says_what_it_looked_for(tmp_path: Path) -> None:
    folder = folder_of(tmp_path, {"accounts.csv": ACCOUNTS_10K, "alerts.csv": ALERTS_10K.splitlines()[0] + "\n"})
    with pytest.raises(InputError, match="no AMLSim transactions file in the folder"):
        build_file(out=tmp_path / "x.zarr", fmt="amlsim", raw=folder)


def test_amlsim_transaction_file_given_alone_reads_its_siblings_by_columns(tmp_path: Path) -> None:
    folder = folder_of(tmp_path, {"people.csv": ACCOUNTS_10K, "tx.csv": TRANSACTIONS_10K})
    store = prepare(tmp_path, "amlsim", folder / "tx.csv", "d.zarr")
    assert store.num_nodes == 5 and labelled_accounts(store) == {4282, 5009}
    assert np.array_equal(store.node_ids(), [0, 1, 77, 4282, 5009])


# --------------------------------------------------------------------------- archives holding several files

def zip_of(path: Path, members: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as bundle:
        for name, text in members.items():
            bundle.writestr(name, text)
    return path


def test_an_archive_reads_the_member_named_like_it_not_the_largest(tmp_path: Path) -> None:
    decoy = "".join(f"{i} {i + 1} {T0 + i}\n" for i in range(500))
    archive = zip_of(tmp_path / "fb-forum.zip", {"zz/decoy.edges": decoy, "fb-forum.edges": rows_text(" ")})
    store = prepare(tmp_path, "network-repository", archive, "a.zarr")
    assert store.num_edges == len(ROWS)
    assert store.provenance["params"]["member"] == "fb-forum.edges"


def test_an_archive_holding_several_candidates_is_refused_naming_each_member(tmp_path: Path) -> None:
    archive = zip_of(tmp_path / "bundle.zip", {"a/one.edges": rows_text(" "), "b/two.edges": rows_text(",")})
    with pytest.raises(DgbenchError, match=r"bundle\.zip: holds 2 network-repository files "
                                           r"\(a/one\.edges, b/two\.edges\); choose one with --member"):
        build_file(out=tmp_path / "x.zarr", fmt="network-repository", raw=archive)
    store = prepare(tmp_path, "network-repository", archive, "b.zarr", member="b/two.edges")
    assert store.num_edges == len(ROWS) and store.provenance["params"]["member"] == "b/two.edges"


def test_an_error_in_an_archive_member_names_its_path_inside_the_archive(tmp_path: Path) -> None:
    archive = zip_of(tmp_path / "bad.zip", {"data/bad.edges": f"1 2 {T0}\n3 x {T0}\n"})
    with pytest.raises(InputError) as caught:
        build_file(out=tmp_path / "x.zarr", fmt="network-repository", raw=archive)
    assert str(caught.value) == f"{archive}:data/bad.edges:2: field 'dst': 'x' is not an integer"
    assert not list(tmp_path.glob(".dgbench-unpack*"))


# --------------------------------------------------------------------------- TGN/DyGLib processed layout

def tgn_rows(count: int = 40, users: int = 5, items: int = 4) -> list[tuple[int, int, float, float]]:
    rng = np.random.default_rng(7)
    times = np.sort(rng.integers(0, 10 * DAY, count)).astype(float)
    return [(int(rng.integers(users)) if k >= users else k, int(rng.integers(items)) if k >= items else k,
             float(times[k]), float(k % 9 == 0)) for k in range(count)]


def test_tgn_processed_csv_reads_features_and_labels_by_event(tmp_path: Path) -> None:
    rows = tgn_rows()
    features = np.arange(len(rows) * 3, dtype=float).reshape(len(rows), 3) + 0.5
    node_features = np.random.default_rng(1).random((5 + 4 + 1, 2))
    csv = write_tgn_processed(rows, features, tmp_path / "data", "toy", node_features=node_features)
    store = prepare(tmp_path, "tgn", csv, "t.zarr")
    events = store.events()
    assert store.num_events == len(rows) and store.num_nodes == 9
    assert store.attrs["bipartite"] == {"num_users": 5, "num_items": 4}
    assert events["label"].tolist() == [int(label) for *_, label in rows]
    assert np.array_equal(events["edge_features"], features.astype(np.float32))  # padding row 0 dropped
    assert events["t"].tolist() == [int(ts) for _, _, ts, _ in rows]
    # node features follow the vertices: original (TGN) id k is row k of ml_toy_node.npy
    assert np.allclose(store.read("node_features"), node_features[store.node_ids()].astype(np.float32))
    assert store.provenance["format_details"]["dataset"] == "toy"


def test_tgn_processed_rows_out_of_time_order_keep_their_features(tmp_path: Path) -> None:
    rows = tgn_rows()
    rows[3], rows[10] = rows[10], rows[3]
    features = np.arange(len(rows), dtype=float).reshape(-1, 1)
    store = prepare(tmp_path, "tgn", write_tgn_processed(rows, features, tmp_path / "d", "toy"), "o.zarr")
    order = np.argsort([ts for _, _, ts, _ in rows], kind="stable")
    assert store.events()["edge_features"][:, 0].tolist() == order.tolist()


def test_tgn_processed_with_shared_ids_is_not_bipartite(tmp_path: Path) -> None:
    rows = [(k % 7, (k * 3 + 1) % 7, float(k * 60), 0.0) for k in range(30)]
    csv = write_tgn_processed(rows, np.zeros((30, 1)), tmp_path / "d", "uci", bipartite=False)
    store = prepare(tmp_path, "tgn", csv, "s.zarr")
    assert store.attrs["bipartite"] is None and store.num_nodes == 7


def test_a_folder_of_several_tgn_datasets_says_which_it_holds_and_reads_the_one_named(tmp_path: Path) -> None:
    for name in ("wikipedia", "reddit"):
        write_tgn_processed(tgn_rows(), np.ones((40, 2)), tmp_path / "processed_data" / name, name)
    archive = tmp_path / "processed_data.zip"
    with zipfile.ZipFile(archive, "w") as bundle:
        for path in sorted((tmp_path / "processed_data").rglob("*")):
            bundle.write(path, path.relative_to(tmp_path).as_posix())
    with pytest.raises(DgbenchError, match=r"processed_data\.zip: holds 2 tgn files \(processed_data/reddit/"
                                           r"ml_reddit\.csv, processed_data/wikipedia/ml_wikipedia\.csv\)"):
        build_file(out=tmp_path / "x.zarr", fmt="tgn", raw=archive)
    store = prepare(tmp_path, "tgn", archive, "w.zarr", member="wikipedia")
    assert store.provenance["params"]["member"] == "processed_data/wikipedia/ml_wikipedia.csv"
    assert store.num_events == 40 and store.read("node_features").shape == (9, 172)
    assert prepare(tmp_path, "tgn", tmp_path / "processed_data", "f.zarr", member="reddit").num_events == 40


def test_jodie_format_refuses_the_tgn_index_column_layout(tmp_path: Path) -> None:
    csv = write_tgn_processed(tgn_rows(200), np.zeros((200, 1)), tmp_path / "d", "toy")
    with pytest.raises(InputError, match=r"ml_toy\.csv:1: header ',u,i,ts,label,idx' is TGN/DyGLib's processed "
                                         r"layout .*--format tgn"):
        build_file(out=tmp_path / "x.zarr", fmt="jodie", raw=csv)


# --------------------------------------------------------------------------- traps: refused or read right

def sociopatterns_text(count: int = 300) -> str:
    """SocioPatterns' ``t i j``: time first (20-second steps), then the two ids, space separated."""
    rng = np.random.default_rng(3)
    return "".join(f"{31220 + 20 * k} {rng.integers(1000, 1075)} {rng.integers(1000, 1075)}\n" for k in range(count))


def test_time_first_file_read_positionally_is_refused_as_swapped(tmp_path: Path) -> None:
    raw = write_bytes(tmp_path / "tij.dat", sociopatterns_text().encode())
    with pytest.raises(InputError, match=r"tij\.dat: refused, looks misread: the time column steps backwards on "
                                         r"[\d,]+ of 300 rows while column src is sorted.*--columns"):
        build_file(out=tmp_path / "x.zarr", fmt="snap", raw=raw)
    assert not (tmp_path / "x.zarr").exists()


def test_time_first_file_reads_right_with_columns_by_position(tmp_path: Path) -> None:
    raw = write_bytes(tmp_path / "tij.dat", sociopatterns_text().encode())
    store = prepare(tmp_path, "snap", raw, "c.zarr", columns="2,3,1", to="stream")
    t = store.events()["t"]
    assert (store.num_events, t.min(), t.max()) == (300, 31220, 31220 + 20 * 299)
    assert store.num_nodes <= 75 and store.provenance["params"]["columns"] == "2,3,1"


def test_u_v_t_w_file_read_as_u_v_w_t_is_refused(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    text = "".join(f"{rng.integers(75)} {rng.integers(75)} {T0 + 60 * k} {rng.integers(1, 6)}\n" for k in range(400))
    raw = write_bytes(tmp_path / "uvtw.edges", text.encode())
    with pytest.raises(InputError, match=r"while column weight is sorted: time and weight look swapped"):
        build_file(out=tmp_path / "x.zarr", fmt="network-repository", raw=raw)
    store = prepare(tmp_path, "network-repository", raw, "r.zarr", columns="1,2,3,4", to="stream")
    assert store.events()["t"][-1] == T0 + 60 * 399


def test_columns_by_header_name_in_any_order(tmp_path: Path) -> None:
    raw = write_bytes(tmp_path / "h.csv", rows_text(",", (3, 2, 1, 0), header="when,stars,to_node,from_node").encode())
    plain = write_bytes(tmp_path / "p.txt", rows_text(" ").encode())
    reference = prepare(tmp_path, "network-repository", plain, "p.zarr")
    store = prepare(tmp_path, "network-repository", raw, "h.zarr", columns="from_node,to_node,when,stars")
    assert store.fingerprint == reference.fingerprint


def test_columns_naming_a_missing_header_field_is_one_line(tmp_path: Path) -> None:
    raw = write_bytes(tmp_path / "h.csv", rows_text(",", header="a,b,c,d").encode())
    with pytest.raises(InputError, match=r"--columns 'a,b,when': no column named 'when' \(header names: a, b, c, d\)"):
        build_file(out=tmp_path / "x.zarr", fmt="snap", raw=raw, columns="a,b,when")


def test_columns_with_a_label_column(tmp_path: Path) -> None:
    text = "".join(f"{a} {b} {t} {k % 2}\n" for k, (a, b, _, t) in enumerate(ROWS))
    store = prepare(tmp_path, "snap", write_bytes(tmp_path / "l.txt", text.encode()), "l.zarr",
                    columns="1,2,3,-,4", to="stream")
    assert store.events()["label"].tolist() == [k % 2 for k in range(len(ROWS))]


def test_an_index_column_read_as_ids_is_refused(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    text = "".join(f"{k} {rng.integers(20)} {T0 + k}\n" for k in range(200))  # idx dst t: idx read as src
    raw = write_bytes(tmp_path / "idx.txt", text.encode())
    with pytest.raises(InputError, match=r"refused, looks misread: 2\d\d distinct vertices in 200 events: "
                                         r"a row-index column read as vertex ids"):
        build_file(out=tmp_path / "x.zarr", fmt="snap", raw=raw)
    assert prepare(tmp_path, "snap", raw, "f.zarr", force=True).num_nodes >= 200


def test_every_event_at_one_time_is_refused(tmp_path: Path) -> None:
    raw = write_bytes(tmp_path / "one.txt", "".join(f"{k} {k + 1} 1\n" for k in range(20)).encode())
    with pytest.raises(InputError, match=r"every one of the 20 events is at time 1"):
        build_file(out=tmp_path / "x.zarr", fmt="snap", raw=raw)


def test_labels_outside_0_1_are_refused(tmp_path: Path) -> None:
    raw = write_bytes(tmp_path / "j.csv", b"user_id,item_id,timestamp,state_label\n0,0,1.0,0\n1,0,2.0,7\n")
    with pytest.raises(InputError, match=r"column state_label holds 1 values outside 0/1 \(e\.g\. 7\)"):
        build_file(out=tmp_path / "x.zarr", fmt="jodie", raw=raw)


def test_millisecond_times_are_refused_as_seconds_and_read_with_time_unit(tmp_path: Path) -> None:
    text = "".join(f"{a} {b} {t * 1000 + 250}\n" for a, b, _, t in ROWS)
    raw = write_bytes(tmp_path / "ms.txt", text.encode())
    with pytest.raises(InputError, match=r"outside 1900-2100 as seconds: .*--time-unit ms"):
        build_file(out=tmp_path / "x.zarr", fmt="snap", raw=raw)
    store = prepare(tmp_path, "snap", raw, "ms.zarr", time_unit="ms", to="stream")
    assert store.events()["t"].tolist() == pytest.approx([t + 0.25 for *_, t in ROWS])
    assert store.provenance["params"]["time_unit"] == "ms"


def test_whole_millisecond_times_become_whole_seconds(tmp_path: Path) -> None:
    raw = write_bytes(tmp_path / "ms.txt", "".join(f"{a} {b} {t * 1000}\n" for a, b, _, t in ROWS).encode())
    reference = prepare(tmp_path, "snap", write_bytes(tmp_path / "s.txt", rows_text(" ", (0, 1, 3)).encode()), "s.zarr")
    assert prepare(tmp_path, "snap", raw, "ms.zarr", time_unit="ms").fingerprint == reference.fingerprint


# --------------------------------------------------------------------------- date-time strings

ISO_VARIANTS = [
    ("naive T", lambda t: datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")),
    ("Z", lambda t: datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")),
    ("offset", lambda t: datetime.fromtimestamp(t + 7200, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S+02:00")),
    ("quoted with space", lambda t: '"' + datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%S") + '"'),
]


@pytest.mark.parametrize("variant", [v[0] for v in ISO_VARIANTS])
def test_iso_times_prepare_as_their_unix_seconds_twin(tmp_path: Path, variant: str) -> None:
    render = dict(ISO_VARIANTS)[variant]
    text = "".join(f"{a},{b},{render(t)}\n" for a, b, _, t in ROWS)
    reference = prepare(tmp_path, "snap", write_bytes(tmp_path / "s.txt", rows_text(" ", (0, 1, 3)).encode()), "s.zarr")
    store = prepare(tmp_path, "snap", write_bytes(tmp_path / "iso.csv", text.encode()), "iso.zarr")
    assert store.fingerprint == reference.fingerprint
    assert store.provenance["format_details"]["time_format"] == "ISO-8601, naive times taken as UTC"


def test_iso_times_with_microseconds_are_kept(tmp_path: Path) -> None:
    raw = write_bytes(tmp_path / "f.csv", b"1,2,2010-11-08T13:45:11.728360\n2,3,2010-11-08T13:45:12.5\n")
    t = prepare(tmp_path, "snap", raw, "f.zarr", to="stream").events()["t"]
    assert t.tolist() == pytest.approx([1289223911.72836, 1289223912.5])


# --------------------------------------------------------------------------- messages

GDELT_ROW = "\t".join(["410412347", "20050101", "200501", "2005", "2005.0027", "AFR", "AFRICA", "AFR"]
                      + [""] * 7 + ["ARE", "UNITED ARAB EMIRATES", "ARE"] + ["1"] * 38 + ["20150218"]
                      + ["http://example.org/a story"])


def test_a_raw_gdelt_export_says_which_layout_prepare_gdelt_reads(tmp_path: Path) -> None:
    assert len(GDELT_ROW.split("\t")) == 58
    raw = write_bytes(tmp_path / "20150218.export.CSV", (GDELT_ROW + "\n" + GDELT_ROW + "\n").encode())
    result = CliRunner().invoke(cli, ["--quiet", "prepare", "gdelt", "--raw", str(raw),
                                      "--out", str(tmp_path / "g.zarr")])
    assert result.exit_code == 1 and result.stderr.count("\n") == 1
    assert "a raw GDELT 1.0 events export (tab-separated, 58 fields, no header)" in result.stderr
    assert "edges.csv with the header ',src,dst,time,int_roll,ext_roll'" in result.stderr
    assert "header" not in result.stderr.split("(")[0]  # the data row is not called a header


def test_a_tgl_edges_file_without_header_is_called_a_data_row(tmp_path: Path) -> None:
    raw = write_bytes(tmp_path / "edges.csv", b"0,1,2,10.0,0,0\n1,2,3,11.0,0,0\n")
    with pytest.raises(InputError, match=r"edges\.csv:1: the first line is a data row \(comma-separated, 6 fields\), "
                                         r"not TGL's header"):
        build_file(out=tmp_path / "x.zarr", fmt="tgl", raw=raw)


def test_a_tab_separated_file_with_spaces_in_values_reports_its_real_fields(tmp_path: Path) -> None:
    raw = write_bytes(tmp_path / "t.csv", ("user_id\titem_id\ttime\n" + GDELT_ROW + "\n").encode())
    with pytest.raises(InputError, match=r"first data row has 1 comma-separated fields \(tab-separated, 58 fields\)"):
        build_file(out=tmp_path / "x.zarr", fmt="jodie", raw=raw)


def test_a_jodie_file_without_header_keeps_its_first_event(tmp_path: Path) -> None:
    raw = write_bytes(tmp_path / "j.csv", b"0,0,1.0,0\n1,0,2.0,1\n")
    store = prepare(tmp_path, "jodie", raw, "j.zarr")
    assert store.num_events == 2 and store.events()["t"].tolist() == [1, 2]


def test_jodie_state_labels_written_as_floats_read(tmp_path: Path) -> None:
    raw = write_bytes(tmp_path / "j.csv", b"u,i,ts,label\n0,0,1.0,0.0\n1,0,2.0,1.0\n")
    assert prepare(tmp_path, "jodie", raw, "j.zarr").events()["label"].tolist() == [0, 1]


def test_jodie_times_as_iso_date_times_read_as_utc_seconds(tmp_path: Path) -> None:
    raw = write_bytes(tmp_path / "j.csv", b"user_id,item_id,timestamp,state_label\n"
                                          b"0,0,2020-09-13T12:26:40,0\n1,0,2020-09-13T14:26:40+02:00,1\n")
    store = prepare(tmp_path, "jodie", raw, "j.zarr")
    assert store.events()["t"].tolist() == [T0, T0]
    assert store.provenance["format_details"]["time_format"] == "ISO-8601, naive times taken as UTC"


def test_an_archive_of_several_tgl_folders_is_refused_naming_them(tmp_path: Path) -> None:
    edges = ",src,dst,time,int_roll,ext_roll\n" + "".join(f"{k},{k % 3},{k % 5},{k}.0,0,0\n" for k in range(12))
    archive = zip_of(tmp_path / "tgl.zip", {"WIKI/edges.csv": edges, "REDDIT/edges.csv": edges + "12,1,2,12.0,0,0\n"})
    with pytest.raises(DgbenchError, match=r"tgl\.zip: holds 2 tgl folders \(REDDIT, WIKI\); choose one with --member"):
        build_file(out=tmp_path / "x.zarr", fmt="tgl", raw=archive)
    store = prepare(tmp_path, "tgl", archive, "w.zarr", member="WIKI")
    assert store.num_events == 12 and store.provenance["params"]["member"] == "WIKI"


def test_tgl_format_given_a_tgn_processed_file_names_the_tgn_family(tmp_path: Path) -> None:
    csv = write_tgn_processed(tgn_rows(), np.zeros((40, 1)), tmp_path / "d", "toy")
    with pytest.raises(InputError, match=r"ml_toy\.csv:1: header ',u,i,ts,label,idx' is TGN/DyGLib's processed "
                                         r"layout, not TGL's: read it with --format tgn"):
        build_file(out=tmp_path / "x.zarr", fmt="tgl", raw=csv)
