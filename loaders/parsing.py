"""The one block-parsing core every raw format uses: bytes blocks -> pyarrow -> numpy columns.

A format declares a :class:`TableSpec` (columns with explicit pyarrow types, delimiter, header,
comment characters); :func:`read_table` streams the file in blocks cut at line ends, hashes the
raw bytes as it reads them, normalises what pyarrow cannot parse itself (``%``/``#`` comment
lines, tabs and runs of spaces in whitespace-separated files), parses each block with
``pyarrow.csv.read_csv`` and explicit column types, and checks ids and times. When a block fails,
its lines are re-scanned in Python to name the exact line and field (pyarrow's row numbers are
relative to the block and blind to skipped lines), and a one-line :class:`InputError` is raised;
values quoted in it are cut to :data:`SHOWN_CHARS` characters (a 200 MB field is not echoed).

It also sniffs what a family leaves open: the text encoding (UTF-8/ASCII is read as it is; UTF-16
and UTF-32, with or without a byte-order mark, are decoded into a temporary UTF-8 copy and named in
the table; binary files are refused) and the field separator (comma, semicolon, tab or whitespace,
:func:`sniff_separator`). The variants each family accepts are listed in docs/loader-formats.md.
"""
from __future__ import annotations

import codecs
import contextlib
import csv
import dataclasses
import hashlib
import math
import mmap
import re
import shutil
import tempfile
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from dgbench.errors import InputError
from dgbench.progress import progress
from dgbench.loaders.events import normalise_time

WHITESPACE = "whitespace"  # any run of spaces and tabs separates fields
BLOCK_BYTES = 64 << 20
ID, FLOAT, INT, TIMESTAMP, FLAG = pa.int64(), pa.float64(), pa.int64(), pa.timestamp("s"), pa.bool_()
DATETIME = pa.timestamp("us")  # ISO-8601 date-times kept to the microsecond, as float Unix seconds
# pyarrow's default spellings of booleans (ConvertOptions true_values/false_values)
FLAG_VALUES = {"1", "True", "TRUE", "true", "0", "False", "FALSE", "false"}
_TAB_TO_SPACE = bytes.maketrans(b"\t", b" ")
_SPACE_RUNS = re.compile(rb" {2,}")
_EDGE_SPACES = re.compile(rb"(?m)^ +| +(?=\r?$)")
_BOM = b"\xef\xbb\xbf"
SHOWN_CHARS = 120  # longest value quoted whole in an error message
SEPARATOR_NAMES = {",": "comma", ";": "semicolon", "\t": "tab", WHITESPACE: "whitespace"}
_SNIFF_LINES = 64  # data lines looked at to choose a separator
_SNIFF_LINE_CHARS = 1 << 20  # longer lines are sniffed from their first MiB
_ENCODING_PROBE = 4096  # bytes looked at to tell UTF-8 from UTF-16/32
# byte-order marks, longest first (UTF-32 LE starts with UTF-16 LE's mark)
_UNICODE_BOMS = ((b"\xff\xfe\x00\x00", "utf-32", "UTF-32 LE with byte-order mark"),
                 (b"\x00\x00\xfe\xff", "utf-32", "UTF-32 BE with byte-order mark"),
                 (b"\xff\xfe", "utf-16", "UTF-16 LE with byte-order mark"),
                 (b"\xfe\xff", "utf-16", "UTF-16 BE with byte-order mark"))


@dataclass(frozen=True)
class Column:
    """One field of a row: its name, explicit type (None: present but not converted) and checks."""

    name: str
    type: pa.DataType | None = None
    nonnegative: bool = False  # vertex ids: a negative value is malformed
    finite: bool = False  # times: NaN/inf is malformed
    numpy_dtype: str | None = None  # the values as this numpy dtype (e.g. float32 weights), cast while copied
    whole_numbers: bool = False  # float times: int64 when all are whole and below 2**53 (events.normalise_time)
    label: str | None = None  # the file's own header name, for messages (None: headerless, use ``name``)

    @property
    def shown(self) -> str:
        """How an error names this field: as the file's header does, else by our name."""
        return self.label or self.name


@dataclass(frozen=True)
class TableSpec:
    """How to read one file: the columns in file order, the delimiter, header and comments."""

    columns: tuple[Column, ...]
    delimiter: str = ","
    header: bool = False  # first non-comment line names the columns (any names: renamed headers are fine)
    comments: bytes = b""  # lines starting with one of these characters are skipped
    strip_spaces: bool = False  # numeric files: spaces around a comma/semicolon/tab separator are dropped

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def converted(self) -> list[Column]:
        return [c for c in self.columns if c.type is not None]


@dataclass
class Table:
    """Parsed columns (numpy) plus what was seen: rows, dropped rows, header, raw sha256."""

    path: Path
    columns: dict[str, np.ndarray]
    rows: int
    rows_dropped: int = 0
    header: str | None = None
    sha256: str = ""
    size_bytes: int = 0
    encoding: str = "UTF-8"  # as read: UTF-16/32 files are decoded first (TextEncoding.label)


@dataclass
class _Block:
    data: bytearray | bytes
    offset: int  # byte offset of the block's first byte in the file
    unterminated: bool = False  # the file's last line, without a newline


# --------------------------------------------------------------------------- sniffing

def clip(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` as an error message quotes it: cut to ``limit`` characters, saying how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text):,} characters)"


@dataclass(frozen=True)
class TextEncoding:
    """How a file's bytes are decoded: ``codec`` for Python, ``label`` for people."""

    codec: str
    label: str

    @property
    def is_utf8(self) -> bool:
        return self.codec == "utf-8"


UTF8 = TextEncoding("utf-8", "UTF-8")


def text_encoding(path: Path) -> TextEncoding:
    """UTF-8 (ASCII, with or without BOM), or UTF-16/UTF-32 told by a byte-order mark or, without
    one, by NUL bytes in every other position (ASCII digits and separators in UTF-16 LE/BE);
    a file with other NUL bytes is not text and is refused."""
    with open(path, "rb") as handle:
        head = handle.read(_ENCODING_PROBE)
    for bom, codec, label in _UNICODE_BOMS:
        if head.startswith(bom):
            return TextEncoding(codec, label)
    if b"\0" not in head:
        return UTF8
    head = head[:len(head) - len(head) % 2]
    even, odd = head[0::2], head[1::2]
    share = {name: half.count(0) / max(1, len(half)) for name, half in (("even", even), ("odd", odd))}
    if share["odd"] > 0.9 and share["even"] < 0.1:
        return TextEncoding("utf-16-le", "UTF-16 LE without byte-order mark")
    if share["even"] > 0.9 and share["odd"] < 0.1:
        return TextEncoding("utf-16-be", "UTF-16 BE without byte-order mark")
    offset = head.index(b"\0")
    raise InputError(path, f"not a text file: NUL byte at offset {offset} (binary data, or an encoding "
                           f"other than UTF-8/UTF-16/UTF-32)")


def data_lines(path: Path, comments: bytes = b"", limit: int = _SNIFF_LINES) -> list[str]:
    """The first ``limit`` non-blank, non-comment lines, decoded (BOM dropped, stripped), for sniffing.

    A line longer than a MiB is sniffed from its first MiB, and sniffing stops there.
    """
    encoding = text_encoding(path)
    codec = "utf-8-sig" if encoding.is_utf8 else encoding.codec
    comment_chars = comments.decode()
    lines: list[str] = []
    with open(path, encoding=codec, errors="replace", newline="") as handle:
        while len(lines) < limit:
            raw = handle.readline(_SNIFF_LINE_CHARS)
            if not raw:
                break
            line = raw.strip()
            if line and line[0] not in comment_chars:
                lines.append(line)
            if not raw.endswith(("\n", "\r")) and len(raw) == _SNIFF_LINE_CHARS:
                break  # a line longer than we sniff: what we have is enough
    return lines


def first_text_line(path: Path) -> str:
    """The file's first line, decoded (KONECT's ``% sym|asym|bip`` header)."""
    lines = data_lines(path, limit=1)
    return lines[0] if lines else ""


def sniff(path: Path, delimiter: str, comments: bytes = b"",
          header: bool = False) -> tuple[list[str] | None, list[str]]:
    """The header fields (when ``header``) and the fields of the first data row, for choosing a spec."""
    lines = data_lines(path, comments, limit=2 if header else 1)
    if len(lines) < (2 if header else 1):
        raise InputError(path, "no data rows (the file is empty or holds only comments/header)")
    if header:
        return split_fields(lines[0], delimiter), split_fields(lines[1], delimiter)
    return None, split_fields(lines[0], delimiter)


def sniff_separator(lines: list[str], candidates: tuple[str, ...] = (",", ";", "\t", WHITESPACE)) -> str:
    """The separator that splits every sampled line into the same number (>= 2) of fields.

    Tried in the order given (a comma before whitespace: "1, 2, 3" is comma-separated); a tab is
    not taken when spaces also separate numbers (KONECT's "u v w<TAB>t" is whitespace), but is when
    spaces sit inside text values ("UNITED STATES" in a tab-separated export). When
    no candidate splits every line alike (a malformed row among the first), the first one that
    splits the first line is used, and the parse names the bad line.
    """
    for separator in candidates:
        if separator == "\t" and _spaces_separate_numbers(lines):
            continue
        counts = {len(split_fields(line, separator)) for line in lines}
        if len(counts) == 1 and counts.pop() >= 2:
            return separator
    first = lines[0] if lines else ""
    return next((s for s in candidates if len(split_fields(first, s)) >= 2), candidates[-1])


def _spaces_separate_numbers(lines: list[str]) -> bool:
    """Whether some tab-separated field is numbers separated by spaces (``1 2 1<TAB>t``)."""
    return any(" " in field and all(is_number(token) for token in field.split())
               for line in lines for field in line.split("\t"))


def describe_fields(line: str) -> str:
    """How a line splits, for messages: ``tab-separated, 57 fields``."""
    separator = sniff_separator([line])
    return f"{SEPARATOR_NAMES[separator]}-separated, {len(split_fields(line, separator))} fields"


def is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _split_chars(chars: bytes) -> list[bytes]:
    return [chars[i:i + 1] for i in range(len(chars))]


def split_fields(line: str, delimiter: str) -> list[str]:
    """Split one line the way pyarrow will after normalisation (used for sniffing and error lines)."""
    if delimiter == WHITESPACE:
        return line.split()
    if '"' not in line:  # what csv.reader would do, without its 128 KiB field limit
        return line.split(delimiter) if line else []
    try:
        return next(csv.reader([line], delimiter=delimiter))
    except csv.Error:  # a quoted field over the csv module's limit
        return line.split(delimiter)


def columns_by_role(path: Path, header: list[str], roles: dict[str, tuple[tuple[str, ...], Column]],
                    required: tuple[str, ...]) -> tuple[Column, ...]:
    """Columns for a file whose header names its fields: each role matches one of several spellings.

    ``roles`` maps a role to (accepted lower-case header names, the Column to use, named after the role);
    header fields matching no role are read but not converted. Renamed/reordered headers are fine.
    """
    columns: list[Column] = []
    found: set[str] = set()
    for position, name in enumerate(header):
        key = name.strip().lower()
        role = next((r for r, (names, _) in roles.items() if key in names and r not in found), None)
        if role is None:
            columns.append(Column(f"_unused{position}"))
        else:
            found.add(role)
            columns.append(dataclasses.replace(roles[role][1], label=name.strip()))
    missing = [r for r in required if r not in found]
    if missing:
        wanted = "; ".join(f"{r}: one of {', '.join(roles[r][0])}" for r in missing)
        raise InputError(path, f"header {clip(','.join(header))!r} lacks required columns ({wanted})", line=1)
    return tuple(columns)


# --------------------------------------------------------------------------- blocks

def _blocks(path: Path, hasher: "hashlib._Hash", block_bytes: int) -> Iterator[_Block]:
    """Blocks of whole lines (a last line without newline comes alone, ``unterminated``).

    Each block is read into its own bytearray and cut after its last newline by seeking the file
    back, so no block is ever copied; every raw byte goes through ``hasher`` exactly once, in a
    background thread (sha256 releases the GIL) so hashing overlaps parsing. Blocks are not resized
    after they are handed to the hasher.
    """
    offset = 0
    size = path.stat().st_size
    pending: Future | None = None
    with open(path, "rb") as handle, ThreadPoolExecutor(max_workers=1) as hashing:
        while True:
            wanted = min(block_bytes, size - offset + 1)  # +1: reading short of it proves the end
            buffer = bytearray(wanted)
            count = handle.readinto(buffer)
            if count == 0:
                return
            del buffer[count:]
            at_end = count < wanted
            cut = buffer.rfind(b"\n") + 1
            if not at_end and cut == 0:  # one line longer than a block: read a bigger block
                handle.seek(offset)
                block_bytes *= 2
                continue
            tail = bytearray(buffer[cut:])
            if not at_end:
                handle.seek(offset + cut)
                tail = bytearray()
            del buffer[cut:]
            if pending is not None:
                pending.result()
            pending = hashing.submit(_hash_in_order, hasher, buffer, tail)
            start = offset
            if offset == 0 and buffer.startswith(_BOM):
                buffer = buffer[len(_BOM):]
                start = len(_BOM)
            if buffer:
                yield _Block(buffer, start)
            if tail.strip():
                yield _Block(tail, offset + cut, unterminated=True)
            offset += cut + len(tail)
            if at_end:
                return


def _hash_in_order(hasher: "hashlib._Hash", *parts: bytearray) -> None:
    for part in parts:
        hasher.update(part)


def _line_number(path: Path, offset: int) -> int:
    """1-based number of the line starting at byte ``offset`` (counted only when an error needs it)."""
    lines, done = 1, 0
    with open(path, "rb") as handle:
        while done < offset:
            data = handle.read(min(BLOCK_BYTES, offset - done))
            if not data:
                break
            lines += data.count(b"\n")
            done += len(data)
    return lines


def _strip_comments(data: bytearray, spec: TableSpec) -> bytearray | bytes:
    """Drop comment lines (checked with fast one-byte searches; most blocks have none)."""
    if spec.comments and any(c in data for c in _split_chars(spec.comments)):
        pattern = rb"(?m)^[ \t]*[" + re.escape(spec.comments) + rb"][^\n]*(?:\n|$)"
        return re.sub(pattern, b"", data)
    return data


def _strip_separator_spaces(data: bytearray | bytes, delimiter: str) -> bytes:
    """Spaces around each separator and at line ends dropped ("1, 2, 3" -> "1,2,3")."""
    padding = rb" *" if delimiter == "\t" else rb"[ \t]*"
    data = re.sub(padding + re.escape(delimiter.encode()) + padding, delimiter.encode(), bytes(data))
    return _EDGE_SPACES.sub(b"", data)


def _normalise_whitespace(data: bytearray | bytes) -> bytes:
    """One space between fields, none at line ends: what pyarrow's single-character delimiter needs."""
    data = bytes(data).translate(_TAB_TO_SPACE)
    if b"  " in data:
        data = _SPACE_RUNS.sub(b" ", data)
    if data.startswith(b" ") or b"\n " in data or b" \n" in data or b" \r" in data:
        data = _EDGE_SPACES.sub(b"", data)
    return data


# --------------------------------------------------------------------------- parsing

def _parse_block(data: bytearray | bytes | memoryview, spec: TableSpec, block_size: int = 16 << 20) -> pa.Table:
    delimiter = " " if spec.delimiter == WHITESPACE else spec.delimiter
    return pacsv.read_csv(
        pa.BufferReader(pa.py_buffer(data)),
        read_options=pacsv.ReadOptions(column_names=spec.names, block_size=block_size),
        parse_options=pacsv.ParseOptions(delimiter=delimiter, ignore_empty_lines=True),
        convert_options=pacsv.ConvertOptions(column_types={c.name: _read_type(c.type) for c in spec.converted},
                                             include_columns=[c.name for c in spec.converted],
                                             quoted_strings_can_be_null=False))


def _read_type(dtype: pa.DataType) -> pa.DataType:
    """Dates are read as text and converted by :func:`dates_to_seconds` (zoned and naive mixed)."""
    return pa.string() if pa.types.is_timestamp(dtype) else dtype


def dates_to_seconds(text: pa.Array) -> pa.Array:
    """ISO-8601 dates/times (with ``Z``/offset or naive = UTC) or ``yyyymmdd`` -> int64 Unix seconds."""
    if text.null_count:
        raise pa.ArrowInvalid("missing date")
    compact = pc.match_substring_regex(text, r"^\d{8}$").to_numpy(zero_copy_only=False)
    zoned = pc.match_substring_regex(text, r"(Z|[+-]\d\d:?\d\d)$").to_numpy(zero_copy_only=False)
    seconds = np.zeros(len(text), dtype=np.int64)
    parsers = ((compact, lambda a: pc.strptime(a, format="%Y%m%d", unit="s")),
               (zoned & ~compact, lambda a: a.cast(pa.timestamp("s", tz="UTC"))),
               (~zoned & ~compact, lambda a: a.cast(pa.timestamp("s"))))
    for mask, parse in parsers:
        if mask.any():
            seconds[mask] = parse(text.filter(pa.array(mask))).cast(pa.int64()).to_numpy()
    return pa.array(seconds)


def datetimes_to_seconds(text: pa.Array) -> pa.Array:
    """ISO-8601 date-times (``T`` or space; fractions; ``Z``/offset, or naive = UTC) -> float64 Unix seconds."""
    if text.null_count:
        raise pa.ArrowInvalid("missing date")
    zoned = pc.match_substring_regex(text, r"(Z|[+-]\d\d:?\d\d)$").to_numpy(zero_copy_only=False)
    micros = np.zeros(len(text), dtype=np.int64)
    for mask, unit in ((zoned, pa.timestamp("us", tz="UTC")), (~zoned, DATETIME)):
        if mask.any():
            micros[mask] = text.filter(pa.array(mask)).cast(unit).cast(pa.int64()).to_numpy()
    return pa.array(micros / 1e6)


def _convert_dates(table: pa.Table, spec: TableSpec) -> pa.Table:
    for column in spec.converted:
        if pa.types.is_timestamp(column.type):
            index = table.schema.get_field_index(column.name)
            convert = datetimes_to_seconds if column.type == DATETIME else dates_to_seconds
            table = table.set_column(index, column.name, convert(table.column(index).combine_chunks()))
    return table


def _parse_checked(data: bytearray | bytes, spec: TableSpec) -> tuple[pa.Table | None, str | None]:
    """Parse and validate a block; whitespace files that fail are normalised and parsed once more.

    Trying the block as it is first keeps clean files (the common case) free of normalisation
    cost; irregular spacing always fails the first try (empty fields are nulls, which are refused).
    """
    table, error = _try_parse(data, spec)
    if table is not None and _values_ok(table, spec):
        return table, None
    if spec.delimiter == WHITESPACE or spec.strip_spaces:
        normal = (_normalise_whitespace(data) if spec.delimiter == WHITESPACE
                  else _strip_separator_spaces(data, spec.delimiter))
        table, error = _try_parse(normal, spec)
        if table is not None and _values_ok(table, spec):
            return table, None
    return None, error or "invalid values"


def _values_ok(table: pa.Table, spec: TableSpec) -> bool:
    """No missing values, no negative ids, no NaN/inf times (checked vectorised; located on failure)."""
    for column in spec.converted:
        values = table.column(column.name)
        if values.null_count:
            return False
        if column.nonnegative and len(values) and pc.min(values).as_py() < 0:
            return False
        if column.finite and pa.types.is_floating(values.type) and len(values):
            if not pc.all(pc.is_finite(values)).as_py():
                return False
    return True


def _field_problem(text: str, column: Column) -> str | None:
    """Why one field would not convert/validate (None when fine): the Python mirror of pyarrow's rules."""
    if column.type is None:
        return None
    if text == "":
        return "missing value"
    try:
        if pa.types.is_integer(column.type):
            value: float = int(text)
        elif pa.types.is_floating(column.type):
            value = float(text)
        elif pa.types.is_timestamp(column.type):
            _parse_timestamp(text)
            return None
        elif pa.types.is_boolean(column.type):
            return None if text in FLAG_VALUES else f"'{clip(text)}' is not a true/false flag"
        else:
            return None
    except ValueError:
        return f"'{clip(text)}' is not {_type_name(column.type)}"
    if column.nonnegative and value < 0:
        return f"negative id {clip(text)}"
    if column.finite and not math.isfinite(value):
        return f"'{clip(text)}' is not a finite time"
    return None


def _parse_timestamp(text: str) -> datetime:
    if text.isdigit() and len(text) == 8:
        return datetime.strptime(text, "%Y%m%d")
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _type_name(dtype: pa.DataType) -> str:
    if pa.types.is_integer(dtype):
        return "an integer"
    if pa.types.is_floating(dtype):
        return "a number"
    return "an ISO-8601 or yyyymmdd date/time"


def locate_error(path: Path, block: _Block, spec: TableSpec, detail: str) -> InputError:
    """Re-scan a failed block line by line and name the first bad line and field."""
    comment_chars = _split_chars(spec.comments) if spec.comments else []
    first_line = _line_number(path, block.offset)
    lines = bytes(block.data).split(b"\n")
    for index, raw in enumerate(lines):
        line = raw.decode("utf-8", errors="replace").strip()
        if not line or (comment_chars and line[0].encode() in comment_chars):
            continue
        fields = split_fields(line, spec.delimiter)
        number = first_line + index
        if len(fields) != len(spec.columns):
            missing = spec.columns[len(fields)].shown if len(fields) < len(spec.columns) else None
            return InputError(path, f"{'missing: ' if missing else ''}expected {len(spec.columns)} fields "
                                    f"({', '.join(c.shown for c in spec.columns)}), found {len(fields)}",
                              line=number, field=missing)
        for text, column in zip(fields, spec.columns):
            problem = _field_problem(text.strip(), column)
            if problem:
                return InputError(path, problem, line=number, field=column.shown)
    last = first_line + len(lines) - 1
    return InputError(path, f"malformed rows between lines {first_line} and {last} ({clip(detail, 2 * SHOWN_CHARS)})")


def read_table(path: str | Path, spec: TableSpec, *, drop_partial_last_line: bool = False,
               block_bytes: int = BLOCK_BYTES) -> Table:
    """Parse a whole file into numpy columns (converted columns only), block by block.

    A last line without a newline that does not parse is a cut-off download: an error naming the
    line, unless ``drop_partial_last_line`` (then it is dropped and counted in ``rows_dropped``).
    """
    path = Path(path)
    encoding = text_encoding(path)
    if not encoding.is_utf8:
        return _read_decoded(path, spec, encoding, drop_partial_last_line=drop_partial_last_line,
                             block_bytes=block_bytes)
    whole = _read_clean_file(path, spec)
    if whole is not None:
        return whole
    blocks = TableBlocks(path, spec, drop_partial_last_line, block_bytes)
    parts: dict[str, list[pa.Array]] = {c.name: [] for c in spec.converted}
    for table in blocks:
        for name in parts:
            parts[name].extend(table.column(name).chunks)
    columns = _numpy_columns(parts, blocks.spec)
    for column in spec.converted:  # as the whole-file parse returns them
        if column.whole_numbers:
            columns[column.name] = normalise_time(columns[column.name])
    return Table(path, columns, blocks.rows, blocks.rows_dropped, blocks.header, blocks.sha256, blocks.size_bytes)


class TableBlocks:
    """A UTF-8 file parsed block by block (``block_bytes`` of whole lines each): iterating yields each
    block's pyarrow table of converted columns, with every check and one-line error of :func:`read_table`;
    afterwards ``rows``, ``rows_dropped``, ``header``, ``sha256`` (of every raw byte) and ``spec`` (with
    the header's labels) describe the whole file. Memory: one block at a time."""

    def __init__(self, path: Path, spec: TableSpec, drop_partial_last_line: bool = False,
                 block_bytes: int | None = None):
        self.path, self.spec, self.drop_partial_last_line = path, spec, drop_partial_last_line
        self.block_bytes = block_bytes or BLOCK_BYTES
        self.rows = self.rows_dropped = 0
        self.header: str | None = None
        self.sha256 = ""
        self.size_bytes = path.stat().st_size

    def __iter__(self) -> Iterator[pa.Table]:
        hasher = hashlib.sha256()
        with progress(total=self.size_bytes, desc=f"parse {self.path.name}", unit="B") as bar:
            for block in _blocks(self.path, hasher, self.block_bytes):
                bar.update(len(block.data))
                if self.spec.header and self.header is None:
                    self.header, block = _take_header(block, self.spec)
                    self.spec = _labelled(self.spec, self.header)
                table = _parse_or_explain(self.path, block, self.spec, self.drop_partial_last_line)
                if table is _DROPPED:
                    self.rows_dropped += 1
                elif table is not None:
                    self.rows += table.num_rows
                    yield table
        if self.spec.header and self.header is None:
            raise InputError(self.path, "empty file: no header line")
        self.sha256 = hasher.hexdigest()


def _read_decoded(path: Path, spec: TableSpec, encoding: TextEncoding, **options) -> Table:
    """A UTF-16/32 file read through a temporary UTF-8 copy (lines are kept, so line numbers are too);
    the table names the original file, its bytes' sha256 and size, and the encoding."""
    with _utf8_copy(path, encoding) as copy:
        try:
            table = read_table(copy, spec, **options)
        except InputError as exc:
            raise InputError(path, f"{exc.problem} (decoded from {encoding.label})", exc.line, exc.field) from None
    return dataclasses.replace(table, path=path, sha256=_file_sha256(path), size_bytes=path.stat().st_size,
                               encoding=encoding.label)


@contextlib.contextmanager
def _utf8_copy(path: Path, encoding: TextEncoding) -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix=".dgbench-decode-"))
    copy = folder / path.name
    decoder = codecs.getincrementaldecoder(encoding.codec)(errors="strict")
    done = 0
    try:
        with open(path, "rb") as source, open(copy, "wb") as target:
            try:
                while chunk := source.read(BLOCK_BYTES):
                    target.write(decoder.decode(chunk).encode("utf-8"))
                    done += len(chunk)
                target.write(decoder.decode(b"", final=True).encode("utf-8"))
            except UnicodeDecodeError as exc:
                raise InputError(path, f"not valid {encoding.label}: undecodable bytes near offset "
                                       f"{done + max(0, exc.start)}") from None
        yield copy
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _file_sha256(path: Path) -> str:
    hasher = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(BLOCK_BYTES):
            hasher.update(chunk)
    return hasher.hexdigest()


def _labelled(spec: TableSpec, header: str | None) -> TableSpec:
    """The spec with each column's header name as its label (positional; role-matched columns keep theirs)."""
    if header is None:
        return spec
    names = split_fields(header, spec.delimiter)
    return dataclasses.replace(spec, columns=tuple(
        c if c.label is not None or i >= len(names) else dataclasses.replace(c, label=names[i].strip())
        for i, c in enumerate(spec.columns)))


def _numpy_columns(parts: dict[str, list[pa.Array]], spec: TableSpec) -> dict[str, np.ndarray]:
    columns = {}
    for name in list(parts):  # one column at a time, freeing its Arrow chunks: peak = data + one column
        columns[name] = _to_numpy(parts.pop(name), _column(spec, name).type, _column(spec, name).numpy_dtype)
    return columns


def _read_clean_file(path: Path, spec: TableSpec) -> Table | None:
    """The fast path: one multi-threaded pyarrow parse of the whole memory-mapped file, hashed
    meanwhile in a thread; None when the file needs the block path.

    Taken when comment lines occur only before the data (as in Network Repository headers); a file
    with comments further down, irregular spacing, a bad value or a cut-off last line fails here
    and is read again by the block path, which repairs what it may and names the bad line and field.
    """
    size = path.stat().st_size
    parsed = _parse_mapped(path, spec) if size else None
    if parsed is None:
        return None
    table, header, sha256 = parsed
    parts = {c.name: table.column(c.name).chunks for c in spec.converted}
    rows, table = table.num_rows, None
    return Table(path, _numpy_columns(parts, spec), rows, 0, header, sha256, size)


def _parse_mapped(path: Path, spec: TableSpec) -> tuple[pa.Table, str | None, str] | None:
    """(table, header, sha256) of a clean file, else None; the mapping is closed before the numpy copies."""
    with open(path, "rb") as handle:
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        start, header = _data_start(mapped, spec)
        if start is None or (not _comments_fail_parse(spec)
                             and any(mapped.find(c, start) >= 0 for c in _split_chars(spec.comments))):
            return None
        hasher = hashlib.sha256()
        with progress(total=len(mapped), desc=f"parse {path.name}", unit="B") as bar, \
                ThreadPoolExecutor(max_workers=1) as hashing:
            hashed = hashing.submit(hasher.update, mapped)  # sha256 releases the GIL: overlaps parsing
            table = _parse_whole_numbers(memoryview(mapped)[start:], spec, _first_line(mapped, start))
            hashed.result()
            bar.update(len(mapped))
        if table is None or not _values_ok(table, spec):
            return None
        return table, header, hasher.hexdigest()
    finally:
        try:
            mapped.close()
        except BufferError:  # a parse error still references the mapping: the collector closes it
            pass


def _first_line(mapped: mmap.mmap, start: int) -> str:
    end = mapped.find(b"\n", start)
    return mapped[start:len(mapped) if end < 0 else end].decode("utf-8", errors="replace").strip()


def _parse_whole_numbers(data: memoryview, spec: TableSpec, first_line: str) -> pa.Table | None:
    """Parse with ``whole_numbers`` columns as int64 (cheaper to parse, and no float-to-int pass later)
    when the first row has integers there; as declared when that fails. Whole numbers from 2**53 on are
    returned as float64, as the float parse (and normalise_time) would have them."""
    fields = split_fields(first_line, spec.delimiter)
    whole = [c.name for c, text in zip(spec.columns, fields)
             if c.whole_numbers and pa.types.is_floating(c.type) and text.lstrip("+-").isdigit()]
    if whole:
        as_int = dataclasses.replace(spec, columns=tuple(
            dataclasses.replace(c, type=INT) if c.name in whole else c for c in spec.columns))
        table, _ = _try_parse(data, as_int, block_size=1 << 20)
        if table is not None:
            for name in whole:
                values = table.column(name)
                bounds = pc.min_max(values).as_py()
                if len(values) and (bounds["min"] <= -2**53 or bounds["max"] >= 2**53):
                    table = table.set_column(table.schema.get_field_index(name), name,
                                             pc.cast(values, pa.float64(), safe=False))
            return table
    return _try_parse(data, spec, block_size=1 << 20)[0]


def _comments_fail_parse(spec: TableSpec) -> bool:
    """Whether a comment line below the data start would make the parse fail anyway (so the file
    need not be scanned for comments first): '%' or '#', after spaces or tabs, is never a number."""
    first = spec.columns[0].type
    return first is not None and (pa.types.is_integer(first) or pa.types.is_floating(first))


def _data_start(mapped: mmap.mmap, spec: TableSpec) -> tuple[int | None, str | None]:
    """Offset of the first data row after a BOM, leading comment/empty lines and the header; None
    when no data row follows (the block path then says what is wrong)."""
    comment = re.compile(rb"[ \t]*[" + re.escape(spec.comments) + rb"]") if spec.comments else None
    comment_chars = _split_chars(spec.comments)
    position = len(_BOM) if mapped[:len(_BOM)] == _BOM else 0
    header: str | None = None
    while position < len(mapped):
        end = mapped.find(b"\n", position)
        end = len(mapped) if end < 0 else end
        line = mapped[position:end]
        if spec.header and header is None:  # the header is found as _take_header finds it
            text = line.decode("utf-8", errors="replace").strip()
            if text and text[0].encode() not in comment_chars:
                header = text
        elif line not in (b"", b"\r") and not (comment is not None and comment.match(line)):
            return position, header
        position = end + 1
    return None, header


_DROPPED = pa.table({})  # marks a cut-off last line that was dropped on request


def _parse_or_explain(path: Path, block: _Block, spec: TableSpec, drop_partial_last_line: bool) -> pa.Table | None:
    """The block's rows; None for a blank block; _DROPPED for a dropped cut-off last line; else InputError."""
    data = _strip_comments(block.data, spec)
    if len(data) < 4096 and not bytes(data).strip():  # pyarrow skips blank lines of bigger blocks itself
        return None
    table, error = _parse_checked(data, spec)
    if table is not None:
        return table
    if not block.unterminated or _last_line_complete(block, spec):
        raise locate_error(path, block, spec, error)  # a whole row with a bad value is no cut-off download
    if drop_partial_last_line:
        return _DROPPED
    raise _partial_line_error(path, block, spec)


def _column(spec: TableSpec, name: str) -> Column:
    return next(c for c in spec.columns if c.name == name)


def _take_header(block: _Block, spec: TableSpec) -> tuple[str | None, _Block]:
    """Split the first non-comment line off the first block; returns (header, the rest as a block)."""
    data, offset = block.data, block.offset
    comment_chars = _split_chars(spec.comments) if spec.comments else []
    start = 0
    while start < len(data):
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end
        text = bytes(data[start:end]).decode("utf-8", errors="replace").strip()
        start = end + 1
        if text and not (comment_chars and text[0].encode() in comment_chars):
            return text, _Block(data[start:], offset + start, block.unterminated)  # a copy: data is being hashed
    return None, _Block(bytearray(), offset + len(data), block.unterminated)


def _try_parse(data: bytes | memoryview, spec: TableSpec, **options: int) -> tuple[pa.Table | None, str | None]:
    try:
        return _convert_dates(_parse_block(data, spec, **options), spec), None
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        return None, str(exc).splitlines()[0]


def _last_line_complete(block: _Block, spec: TableSpec) -> bool:
    """Whether the unterminated last line has every field (it may still hold a bad value)."""
    text = bytes(block.data).rsplit(b"\n", 1)[-1].decode("utf-8", errors="replace").strip()
    return len(split_fields(text, spec.delimiter)) == len(spec.columns)


def _partial_line_error(path: Path, block: _Block, spec: TableSpec) -> InputError:
    text = bytes(block.data).decode("utf-8", errors="replace").strip()
    fields = split_fields(text, spec.delimiter)
    return InputError(path, f"the file ends mid-line ('{clip(text, 60)}': {len(fields)} of {len(spec.columns)} fields, "
                            f"no final newline) - a cut-off download? Download it again, or pass "
                            f"--drop-partial-last-line to drop that line", line=_line_number(path, block.offset))


def column_numpy(table: pa.Table, name: str) -> np.ndarray:
    """One column of a parsed block as a numpy-owned array (see :func:`_to_numpy`)."""
    column = table.column(name)
    return _to_numpy(column.chunks, column.type)


def _to_numpy(chunks: list[pa.Array], dtype: pa.DataType, numpy_dtype: str | None = None) -> np.ndarray:
    """One numpy-owned array from the blocks' chunks (as ``numpy_dtype`` when given: one pass, no second copy).

    Always a copy: numpy views of Arrow buffers that live until interpreter exit can make the
    process abort in Arrow's teardown ("terminate called without an active exception").
    """
    dtype = pa.int64() if pa.types.is_timestamp(dtype) else dtype  # dates arrive as Unix seconds
    if not chunks:
        return np.zeros(0, dtype=numpy_dtype or dtype.to_pandas_dtype())
    return np.concatenate([chunk.to_numpy(zero_copy_only=False) for chunk in chunks], dtype=numpy_dtype,
                          casting="same_kind")
