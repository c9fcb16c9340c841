"""AMLSim outputs (IBM's anti-money-laundering simulator), every published generation of them.

Layouts, told apart by their header names (case-insensitive), all read by one role table:

* 2019 sample runs: ``transactions.csv`` = ``sourceNodeId,targetNodeId,value,time`` + ``nodes.csv``
  (``nodeid,isFraud,...``);
* 2019 outputs: ``tx.csv`` = ``TXN_ID,ACCOUNT_ID,COUNTER_PARTY_ACCOUNT_NUM,...,TXN_AMOUNT_ORIG,start,end``
  + ``accounts.csv`` (``ACCOUNT_ID,...,isFraud``) + ``alerts.csv`` (``ACCOUNT_ID`` of alerted accounts);
* current ``convert_logs.py``: ``tran_id,orig_acct,bene_acct,tx_type,base_amt,tran_timestamp,is_sar,alert_id``
  (ISO-8601 or yyyymmdd dates) + ``accounts.csv`` (``acct_id,...``);
* the "AMLSim 10K/100K example": ``TX_ID,SENDER_ACCOUNT_ID,RECEIVER_ACCOUNT_ID,TX_TYPE,TX_AMOUNT,TIMESTAMP,
  IS_FRAUD,ALERT_ID`` (integer steps) + ``accounts.csv`` (``ACCOUNT_ID,...,IS_FRAUD``).

Amounts become edge weights, per-transaction SAR/fraud flags the edge ``label``, per-account flags
``node_label``; the accounts file (when present) defines the vertex set, so accounts that never
transact are kept. Integer times are simulation steps (one snapshot per step by default).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from dgbench.errors import InputError
from loaders.events import Events, RawFile
from loaders.formats import LoadOptions, register_format
from loaders.parsing import (FLAG, FLOAT, ID, INT, TIMESTAMP, Column, Table, TableSpec, columns_by_role, read_table,
                             sniff)

TRANSACTION_FILES = ("transactions.csv", "tx.csv")
ACCOUNT_FILES = ("nodes.csv", "accounts.csv")
ALERT_FILES = ("alerts.csv",)
ACCOUNT_ID_NAMES = ("nodeid", "account_id", "acct_id")
FLAG_NAMES = ("isfraud", "is_fraud", "is_sar")
TIME_NAMES = ("time", "start", "tran_timestamp", "timestamp")


def transaction_roles(time_type: pa.DataType) -> dict[str, tuple[tuple[str, ...], Column]]:
    """Header spellings of each transaction field across the AMLSim generations."""
    return {"src": (("sourcenodeid", "account_id", "orig_acct", "sender_account_id"),
                    Column("src", ID, nonnegative=True)),
            "dst": (("targetnodeid", "counter_party_account_num", "bene_acct", "receiver_account_id"),
                    Column("dst", ID, nonnegative=True)),
            "amount": (("value", "txn_amount_orig", "base_amt", "tx_amount"), Column("amount", FLOAT)),
            "t": (TIME_NAMES, Column("t", time_type, finite=True)),
            "flag": (FLAG_NAMES, Column("flag", FLAG))}


ACCOUNT_ROLES = {"id": (ACCOUNT_ID_NAMES, Column("id", ID, nonnegative=True)),
                 "flag": (FLAG_NAMES, Column("flag", FLAG))}
ALERT_ROLES = {"id": (ACCOUNT_ID_NAMES, Column("id", ID, nonnegative=True))}


def _transactions_file(path: Path) -> Path:
    if path.is_file():
        return path
    found = next((path / n for n in TRANSACTION_FILES if (path / n).is_file()), None)
    if found is None:
        raise InputError(path, f"no AMLSim transactions file in the folder (looked for {', '.join(TRANSACTION_FILES)})")
    return found


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
    transactions = _transactions_file(path)
    header, first_row = sniff(transactions, ",", header=True)
    time_type = _time_type(header, first_row)
    columns = columns_by_role(transactions, header, transaction_roles(time_type), ("src", "dst", "t"))
    table = read_table(transactions, TableSpec(columns, delimiter=",", header=True),
                       drop_partial_last_line=options.drop_partial_last_line)
    cols = table.columns
    raw_files = [RawFile(transactions.name, table.sha256, table.size_bytes)]
    nodes, node_label = _accounts(transactions.parent, raw_files, options)
    flag = cols.get("flag")
    amount = cols.get("amount")
    return Events(src=cols["src"], dst=cols["dst"], t=cols["t"], source_file=transactions,
                  time_unit="step" if time_type == INT else "s",
                  weight=None if amount is None else amount.astype(np.float32),
                  label=None if flag is None else flag.astype(np.int8), directed=True,
                  bipartite=bool(options.bipartite), nodes=nodes, node_label=node_label, raw_files=raw_files,
                  rows_dropped=table.rows_dropped,
                  details={"header": table.header, "accounts_file": nodes is not None,
                           "time": "simulation step" if time_type == INT else "date (seconds since 1970)"})


def _accounts(folder: Path, raw_files: list[RawFile],
              options: LoadOptions) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Account ids (the vertex set) and fraud flags from nodes.csv/accounts.csv, plus alerted accounts."""
    accounts = next((folder / n for n in ACCOUNT_FILES if (folder / n).is_file()), None)
    if accounts is None:
        return None, None
    table = _read_roles(accounts, ACCOUNT_ROLES, options)
    raw_files.append(RawFile(accounts.name, table.sha256, table.size_bytes, role="accounts"))
    ids = table.columns["id"]
    label = table.columns["flag"].astype(np.int8) if "flag" in table.columns else np.zeros(len(ids), np.int8)
    alerts = next((folder / n for n in ALERT_FILES if (folder / n).is_file()), None)
    if alerts is not None:
        alerted = _read_roles(alerts, ALERT_ROLES, options)
        raw_files.append(RawFile(alerts.name, alerted.sha256, alerted.size_bytes, role="alerts"))
        label[np.isin(ids, alerted.columns["id"])] = 1
    unique_ids, first = np.unique(ids, return_index=True)
    if len(unique_ids) != len(ids):
        raise InputError(accounts, f"{len(ids) - len(unique_ids)} account ids are listed twice", field="id")
    return unique_ids, label[first]


def _read_roles(path: Path, roles: dict, options: LoadOptions) -> Table:
    header, _ = sniff(path, ",", header=True)
    spec = TableSpec(columns_by_role(path, header, roles, ("id",)), delimiter=",", header=True)
    return read_table(path, spec, drop_partial_last_line=options.drop_partial_last_line)
