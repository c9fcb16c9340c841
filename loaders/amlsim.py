"""AMLSim outputs (IBM's anti-money-laundering simulator), every published generation of them.

Files are identified by their columns (header names, case-insensitive), never by their names, and
every layout is read by one role table: transaction lists, transaction- and account-level alert
lists, account lists; labels come from whichever file carries them.
See docs/loader-formats.md (section "AMLSim"), which lists the generations with sources.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from dgbench.errors import InputError
from dgbench.loaders.events import Events, RawFile
from dgbench.loaders.formats import LoadOptions, register_format
from dgbench.loaders.parsing import (FLAG, FLOAT, ID, INT, TIMESTAMP, Column, Table, TableSpec, clip, columns_by_role,
                             data_lines, read_table, sniff_separator, split_fields)

TRANSACTION_FILES = ("transactions.csv", "tx.csv")  # preferred when a folder holds several transaction lists
ACCOUNT_FILES = ("nodes.csv", "accounts.csv")
ACCOUNT_ID_NAMES = ("nodeid", "account_id", "acct_id")
SOURCE_NAMES = ("sourcenodeid", "account_id", "orig_acct", "sender_account_id")
TARGET_NAMES = ("targetnodeid", "counter_party_account_num", "bene_acct", "receiver_account_id")
FLAG_NAMES = ("isfraud", "is_fraud", "is_sar", "issar")
ACCOUNT_FLAG_NAMES = FLAG_NAMES + ("prior_sar_count",)  # current schema.json: the account's SAR flag
TIME_NAMES = ("time", "start", "tran_timestamp", "timestamp")
TX_ID_NAMES = ("tx_id", "txn_id", "tran_id")
ALERT_MARKERS = ("alert_type", "alert_key", "alert_text")  # alert_id alone also appears on transactions
SEPARATORS = (",", ";", "\t")


def transaction_roles(time_type: pa.DataType, with_tx_id: bool = False) -> dict[str, tuple[tuple[str, ...], Column]]:
    """Header spellings of each transaction field across the AMLSim generations."""
    roles = {"src": (SOURCE_NAMES, Column("src", ID, nonnegative=True)),
             "dst": (TARGET_NAMES, Column("dst", ID, nonnegative=True)),
             "amount": (("value", "txn_amount_orig", "base_amt", "tx_amount"), Column("amount", FLOAT)),
             "t": (TIME_NAMES, Column("t", time_type, finite=True)),
             "flag": (FLAG_NAMES, Column("flag", FLAG))}
    if with_tx_id:
        roles["tx_id"] = (TX_ID_NAMES, Column("tx_id", ID))
    return roles


ACCOUNT_ROLES = {"id": (ACCOUNT_ID_NAMES, Column("id", ID, nonnegative=True)),
                 "flag": (ACCOUNT_FLAG_NAMES, Column("flag", FLAG))}
ALERT_ACCOUNT_ROLES = {"id": (ACCOUNT_ID_NAMES, Column("id", ID, nonnegative=True)),
                       "flag": (FLAG_NAMES, Column("flag", FLAG))}
ALERT_TRANSACTION_ROLES = {"tx_id": (TX_ID_NAMES, Column("tx_id", ID)), "flag": (FLAG_NAMES, Column("flag", FLAG))}


@dataclass(frozen=True)
class CsvFile:
    """One CSV file of an AMLSim folder: its separator, header (lower case) and what its columns make it."""

    path: Path
    separator: str
    header: list[str]
    kind: str  # transactions | alert_transactions | alert_accounts | accounts | other

    def has(self, names: tuple[str, ...]) -> bool:
        return any(name in names for name in self.header)


def classify(path: Path) -> CsvFile:
    """What an AMLSim CSV file holds, from its header's column names."""
    lines = data_lines(path, limit=8)
    separator = sniff_separator(lines, SEPARATORS) if lines else ","
    header = [name.strip().lower() for name in split_fields(lines[0], separator)] if lines else []
    names = set(header)
    transaction = bool(names & set(SOURCE_NAMES)) and bool(names & set(TARGET_NAMES))
    alert = bool(names & set(ALERT_MARKERS))
    if transaction and names & set(TIME_NAMES):
        kind = "alert_transactions" if alert else "transactions"
    elif alert and names & set(ACCOUNT_ID_NAMES):
        kind = "alert_accounts"
    elif names & set(ACCOUNT_ID_NAMES) and not transaction and not names & set(TX_ID_NAMES):
        kind = "accounts"
    else:
        kind = "other"
    return CsvFile(path, separator, header, kind)


def _time_type(header: list[str], first_row: list[str]) -> pa.DataType:
    """Integer simulation steps read as int64; anything else must be a date (ISO-8601 or yyyymmdd)."""
    position = next((i for i, name in enumerate(header) if name.strip().lower() in TIME_NAMES), None)
    if position is None or position >= len(first_row):
        return INT
    value = first_row[position].strip()
    is_step = value.lstrip("-").isdigit() and not (len(value) == 8 and value.startswith(("19", "20")))
    return INT if is_step else TIMESTAMP


@register_format("amlsim", summary="AMLSim output folder or transactions file (all published layouts)",
                 natural="snapshots", patterns=TRANSACTION_FILES, folder_input=True)
def load_amlsim(path: Path, options: LoadOptions) -> Events:
    files = _folder_files(path)
    transactions = _transactions_file(path, files)
    by_kind = {kind: [f for f in files if f.kind == kind and f.path != transactions.path]
               for kind in ("accounts", "alert_accounts", "alert_transactions")}
    alert_transactions = by_kind["alert_transactions"] if not transactions.has(FLAG_NAMES) else []
    table, time_type = _read_transactions(transactions, options, with_tx_id=bool(alert_transactions))
    cols = table.columns
    raw_files = [RawFile(transactions.path.name, table.sha256, table.size_bytes)]
    label = cols["flag"].astype(np.int8) if "flag" in cols else None
    if alert_transactions:
        label = _alerted_transactions(cols["tx_id"], transactions, alert_transactions, raw_files, options)
    nodes, node_label = _accounts(_pick_accounts(path, by_kind["accounts"]), by_kind["alert_accounts"],
                                  raw_files, options)
    amount = cols.get("amount")
    return Events(src=cols["src"], dst=cols["dst"], t=cols["t"], source_file=transactions.path,
                  time_unit="step" if time_type == INT else "s",
                  weight=None if amount is None else amount.astype(np.float32),
                  label=label, directed=True,
                  bipartite=bool(options.bipartite), nodes=nodes, node_label=node_label, raw_files=raw_files,
                  rows_dropped=table.rows_dropped,
                  details={"header": table.header, "accounts_file": nodes is not None,
                           "files": {f.path.name: f.kind for f in files},
                           "time": "simulation step" if time_type == INT else "date (seconds since 1970)"})


def _folder_files(path: Path) -> list[CsvFile]:
    """Every CSV beside the transactions (the folder's, or the given file's siblings), classified;
    a folder without transactions of its own is searched below, shallowest first."""
    folder = path if path.is_dir() else path.parent
    files = [classify(p) for p in sorted(folder.glob("*.csv")) if p.is_file()]
    if path.is_dir() and not any(f.kind == "transactions" for f in files):
        for sub in sorted({p.parent for p in folder.rglob("*.csv")}, key=lambda p: (len(p.parts), str(p))):
            inner = [classify(p) for p in sorted(sub.glob("*.csv")) if p.is_file()]
            if any(f.kind == "transactions" for f in inner):
                return inner
    return files


def _transactions_file(path: Path, files: list[CsvFile]) -> CsvFile:
    if path.is_file():
        given = classify(path)
        if given.kind != "transactions":
            raise InputError(path, f"not an AMLSim transactions file: its columns ({clip(','.join(given.header))}) "
                                   f"make it {_KIND_NAMES[given.kind]}; pass the folder or the transactions file")
        return given
    found = [f for f in files if f.kind == "transactions"]
    if not found:
        raise InputError(path, "no AMLSim transactions file in the folder (no CSV has a source, a target and a "
                               f"time column: {', '.join(SOURCE_NAMES)} / {', '.join(TARGET_NAMES)} / "
                               f"{', '.join(TIME_NAMES)})")
    named = [f for name in TRANSACTION_FILES for f in found if f.path.name == name]
    if len(found) > 1 and not named:
        raise InputError(path, f"several transaction lists ({', '.join(f.path.name for f in found)}); "
                               "pass the one to read as --raw")
    return (named or found)[0]


_KIND_NAMES = {"accounts": "an account list", "alert_accounts": "an account-level alert list",
               "alert_transactions": "a transaction-level alert list", "other": "no AMLSim file it knows",
               "transactions": "a transaction list"}


def _header_and_first_row(file: CsvFile) -> tuple[list[str], list[str]]:
    lines = data_lines(file.path, limit=2)
    if len(lines) < 2:
        raise InputError(file.path, "no data rows (the file is empty or holds only comments/header)")
    return split_fields(lines[0], file.separator), split_fields(lines[1], file.separator)


def _read_transactions(file: CsvFile, options: LoadOptions, with_tx_id: bool) -> tuple[Table, pa.DataType]:
    """The transactions (with their ids when alert lists are matched to them) and the time type."""
    header, first_row = _header_and_first_row(file)
    time_type = _time_type(header, first_row)
    required = ("src", "dst", "t", "tx_id") if with_tx_id else ("src", "dst", "t")
    columns = columns_by_role(file.path, header, transaction_roles(time_type, with_tx_id), required)
    table = read_table(file.path, TableSpec(columns, delimiter=file.separator, header=True),
                       drop_partial_last_line=options.drop_partial_last_line)
    return table, time_type


def _alerted_transactions(tx_ids: np.ndarray, transactions: CsvFile, alert_files: list[CsvFile],
                          raw_files: list[RawFile], options: LoadOptions) -> np.ndarray:
    """Edge labels from transaction-level alert lists: 1 where the transaction id is in a flagged alert row."""
    flagged: list[np.ndarray] = []
    for file in alert_files:
        table = _read_roles(file, ALERT_TRANSACTION_ROLES, ("tx_id",), options)
        raw_files.append(RawFile(file.path.name, table.sha256, table.size_bytes, role="alert_transactions"))
        ids = table.columns["tx_id"]
        flagged.append(ids[table.columns["flag"]] if "flag" in table.columns else ids)
    return np.isin(tx_ids, np.concatenate(flagged)).astype(np.int8)


def _pick_accounts(path: Path, candidates: list[CsvFile]) -> CsvFile | None:
    """The account list: by its usual name when several files look like one, else the one with a flag."""
    if len(candidates) <= 1:
        return candidates[0] if candidates else None
    named = [f for name in ACCOUNT_FILES for f in candidates if f.path.name == name]
    flagged = [f for f in candidates if f.has(ACCOUNT_FLAG_NAMES)]
    chosen = named or flagged
    if not chosen or (not named and len(flagged) > 1):
        raise InputError(path, f"several account lists ({', '.join(f.path.name for f in candidates)}); "
                               "keep one beside the transactions")
    return chosen[0]


def _accounts(accounts: CsvFile | None, alert_files: list[CsvFile], raw_files: list[RawFile],
              options: LoadOptions) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Account ids (the vertex set) and SAR/fraud flags from the account list, OR-ed with alert lists."""
    if accounts is None:
        return None, None
    table = _read_roles(accounts, ACCOUNT_ROLES, ("id",), options)
    raw_files.append(RawFile(accounts.path.name, table.sha256, table.size_bytes, role="accounts"))
    ids = table.columns["id"]
    label = table.columns["flag"].astype(np.int8) if "flag" in table.columns else np.zeros(len(ids), np.int8)
    with_flags = [f for f in alert_files if f.has(FLAG_NAMES)]
    for file in with_flags or alert_files:
        alerted = _read_roles(file, ALERT_ACCOUNT_ROLES, ("id",), options)
        raw_files.append(RawFile(file.path.name, alerted.sha256, alerted.size_bytes, role="alerts"))
        members = alerted.columns["id"]
        if "flag" in alerted.columns:
            members = members[alerted.columns["flag"]]
        label[np.isin(ids, members)] = 1
    unique_ids, first = np.unique(ids, return_index=True)
    if len(unique_ids) != len(ids):
        raise InputError(accounts.path, f"{len(ids) - len(unique_ids)} account ids are listed twice", field="id")
    return unique_ids, label[first]


def _read_roles(file: CsvFile, roles: dict, required: tuple[str, ...], options: LoadOptions) -> Table:
    header, _ = _header_and_first_row(file)
    spec = TableSpec(columns_by_role(file.path, header, roles, required), delimiter=file.separator, header=True)
    return read_table(file.path, spec, drop_partial_last_line=options.drop_partial_last_line)
