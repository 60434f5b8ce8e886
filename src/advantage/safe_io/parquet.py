"""Parquet datasets read within bounds (:func:`read_parquet_rows`): the decoded size the footer declares is
checked, then rows are decoded in batches whose decoded bytes and longest value are checked as they
arrive, so a footer that lies still stops at the first batch over a limit (the rules of bounded reading:
:mod:`advantage.safe_io.read`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from advantage.errors import AdvantageError, ConfigError
from advantage.safe_io.read import Error, GiB, MiB, name_of, open_regular

PARQUET_MAX_DECODED = 1 * GiB  # a dataset's values once decoded (Arrow's bytes)
PARQUET_BATCH_BYTES = 64 * MiB  # decoded per batch, by the footer's average row size
PARQUET_FOOTER_MAX_BYTES = 16 * MiB


def read_parquet_rows(
    path: str | os.PathLike[str],
    what: str | None = None,
    *,
    max_value_bytes: int,
    max_decoded: int | None = None,
    error: Error = ConfigError,
) -> list[dict[str, Any]]:
    """The rows of a Parquet file as dicts, decoded within bounds.

    Before any data is read, the footer's declared decoded size (every column chunk's uncompressed size)
    must be at most ``max_decoded`` bytes (default :data:`PARQUET_MAX_DECODED`): a file of a few hundred
    kilobytes can compress gigabytes of one repeated byte. Rows are then decoded in batches sized from
    the footer's largest average row (about :data:`PARQUET_BATCH_BYTES` each); each batch's decoded bytes
    count against ``max_decoded`` and its longest string or binary value (nested lists and structs
    included) must be at most ``max_value_bytes`` before it becomes Python objects. So a footer that
    understates the sizes is caught at the first batch past a limit."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    name = name_of(path, what)
    max_decoded = PARQUET_MAX_DECODED if max_decoded is None else max_decoded
    fd = open_regular(path, name, error)  # a regular file (no FIFO, no device), checked before pyarrow
    os.close(fd)
    try:
        pf = pq.ParquetFile(
            str(path), thrift_string_size_limit=PARQUET_FOOTER_MAX_BYTES, thrift_container_size_limit=1 << 20
        )
        md = pf.metadata
        declared, widest = 0, 1
        for g in range(md.num_row_groups):
            group = md.row_group(g)
            size = sum(group.column(c).total_uncompressed_size for c in range(group.num_columns))
            declared += max(size, group.total_byte_size)
            widest = max(widest, -(-size // max(group.num_rows, 1)))
    except AdvantageError:
        raise
    except Exception as e:  # pyarrow raises ArrowInvalid/OSError subclasses for corrupt files
        raise error(f"{name}: not a readable parquet file ({' '.join(str(e).split())[:200]})") from None
    if declared > max_decoded:
        raise error(
            f"{name}: its values decode to {declared} bytes (the file is {Path(path).stat().st_size}), "
            f"over the limit of {max_decoded} bytes; refused before decoding them"
        )
    batch_rows = max(1, min(65536, PARQUET_BATCH_BYTES // widest))
    rows: list[dict[str, Any]] = []
    decoded = 0
    try:
        for batch in pf.iter_batches(batch_size=batch_rows, use_threads=False):
            decoded += batch.nbytes
            if decoded > max_decoded:
                raise error(
                    f"{name}: its values decode to more than {max_decoded} bytes (more than its footer "
                    "declares); refused"
                )
            for column, array in zip(batch.schema.names, batch.columns, strict=True):
                longest = _longest_value(array, pa)
                if longest > max_value_bytes:
                    first = len(rows)
                    raise error(
                        f"{name}: column {column[:60]!r} holds a value of {longest} bytes in rows "
                        f"{first}-{first + batch.num_rows - 1}, over the limit of {max_value_bytes} "
                        "bytes per value; refused before decoding it"
                    )
            rows.extend(batch.to_pylist())
    except AdvantageError:
        raise
    except Exception as e:
        raise error(f"{name}: not a readable parquet file ({' '.join(str(e).split())[:200]})") from None
    return rows


def _longest_value(array: Any, pa: Any) -> int:
    """The byte length of the longest string or binary value in the Arrow ``array``, looking inside
    lists, structs, maps and dictionaries."""
    import pyarrow.compute as pc

    t = array.type
    if pa.types.is_dictionary(t):
        return _longest_value(array.dictionary, pa)
    if (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
    ):
        if len(array) == 0:
            return 0
        longest = pc.max(pc.binary_length(array)).as_py()
        return int(longest or 0)
    if pa.types.is_map(t):
        return max(_longest_value(array.keys, pa), _longest_value(array.items, pa))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _longest_value(array.flatten(), pa)
    if pa.types.is_struct(t):
        return max((_longest_value(array.field(i), pa) for i in range(t.num_fields)), default=0)
    return 0
