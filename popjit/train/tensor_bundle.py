"""TensorFlow's checkpoint files (the "tensor bundle"), written and read without TensorFlow or protobuf.

A checkpoint ``PREFIX`` is two files. ``PREFIX.data-00000-of-00001`` holds the tensors' bytes one after
another (little-endian; a string tensor as the varint64 length of each element, the masked CRC32C of
those lengths taken as uint32s, then the bytes). ``PREFIX.index`` is a LevelDB table (SSTable): sorted keys with
prefix-compressed entries in data blocks, each block followed by its type byte and masked CRC32C, an
index block pointing at the data blocks, an empty meta-index block and a 48-byte footer ending in
LevelDB's magic number. Its first key, the empty string, holds a ``BundleHeaderProto`` (one shard,
little-endian, version 1); every other key is a tensor's name with its ``BundleEntryProto`` (dtype,
shape, offset and size in the data file, masked CRC32C of its bytes). The few protobuf messages are
encoded here by hand (varints, length-delimited fields, a fixed32).

Files are written beside the target under temporary names and renamed into place, data file first,
so a reader never sees a half-written checkpoint. A damaged file raises ``DataLossError`` naming it.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from typing import Any

import numpy as np

from popjit.errors import DataLossError, NotFoundError

DATA_SUFFIX = ".data-00000-of-00001"
INDEX_SUFFIX = ".index"
_MAGIC = 0xDB4775248B80FB57
_BLOCK_SIZE = 4096
_RESTART_INTERVAL = 16
_FOOTER_SIZE = 48

#: TensorFlow's DataType enum values of the dtypes a checkpoint holds.
DTYPES: dict[str, int] = {"float32": 1, "float64": 2, "int32": 3, "uint8": 4, "int16": 5, "int8": 6, "string": 7,
                          "int64": 9, "bool": 10, "bfloat16": 14, "uint16": 17, "float16": 19, "uint32": 22,
                          "uint64": 23}
_NUMPY_OF = {code: name for name, code in DTYPES.items()}


# -- CRC32C (Castagnoli), as LevelDB and TensorFlow mask it ----------------------------------------------------
def _crc_table() -> np.ndarray:
    table = np.zeros(256, np.uint32)
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table[n] = c
    return table


_TABLE = _crc_table()
_numba_crc: Any = None


def _crc_python(data: bytes, crc: int) -> int:
    table = _TABLE
    crc ^= 0xFFFFFFFF
    for byte in data:
        crc = int(table[(crc ^ byte) & 0xFF]) ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def crc32c(data: bytes | memoryview, crc: int = 0) -> int:
    """The CRC32C of ``data`` continuing from ``crc`` (tensor data runs through a Numba loop)."""
    global _numba_crc
    if len(data) < 4096:
        return _crc_python(bytes(data), crc)
    if _numba_crc is None:
        # why: Numba is compiled only when a large tensor is checkpointed
        import numba

        @numba.njit(cache=False, nogil=True)
        def run(buf: np.ndarray, table: np.ndarray, crc: np.uint32) -> np.uint32:
            c = crc ^ np.uint32(0xFFFFFFFF)
            for b in buf:
                c = table[(c ^ b) & np.uint32(0xFF)] ^ (c >> np.uint32(8))
            return c ^ np.uint32(0xFFFFFFFF)

        _numba_crc = run
    return int(_numba_crc(np.frombuffer(data, np.uint8), _TABLE, np.uint32(crc)))


def mask(crc: int) -> int:
    """LevelDB's masked CRC (stored so that a CRC of data holding CRCs stays well spread)."""
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def unmask(masked: int) -> int:
    rot = (masked - 0xA282EAD8) & 0xFFFFFFFF
    return ((rot >> 17) | (rot << 15)) & 0xFFFFFFFF


# -- protobuf wire format -----------------------------------------------------------------------------------
def varint(value: int) -> bytes:
    """An unsigned varint (negative int32/int64 values as their 64-bit two's complement)."""
    value &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """``(value, position after it)``."""
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def field_varint(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value) if value else b""


def field_bytes(number: int, value: bytes | str) -> bytes:
    data = value.encode() if isinstance(value, str) else value
    return varint(number << 3 | 2) + varint(len(data)) + data


def field_message(number: int, value: bytes) -> bytes:
    return field_bytes(number, value)


def parse_message(data: bytes) -> list[tuple[int, Any]]:
    """A message's ``(field number, value)`` pairs in order: ints for varint/fixed fields, bytes otherwise."""
    out: list[tuple[int, Any]] = []
    pos = 0
    while pos < len(data):
        key, pos = read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = read_varint(data, pos)
        elif wire == 2:
            size, pos = read_varint(data, pos)
            value, pos = data[pos:pos + size], pos + size
        elif wire == 5:
            value, pos = struct.unpack_from("<I", data, pos)[0], pos + 4
        elif wire == 1:
            value, pos = struct.unpack_from("<Q", data, pos)[0], pos + 8
        else:
            raise ValueError(f"unsupported wire type {wire}")
        out.append((number, value))
    return out


# -- the two messages of an index --------------------------------------------------------------------------
class Entry:
    """A ``BundleEntryProto``: where a tensor's bytes are and what they hold."""

    def __init__(self, dtype: str, shape: tuple[int, ...], offset: int, size: int, crc: int) -> None:
        self.dtype, self.shape, self.offset, self.size, self.crc = dtype, shape, offset, size, crc

    def encode(self) -> bytes:
        dims = b"".join(field_message(2, field_varint(1, d) or b"") for d in self.shape)
        return (field_varint(1, DTYPES[self.dtype]) + field_message(2, dims) + field_varint(4, self.offset)
                + field_varint(5, self.size) + b"\x35" + struct.pack("<I", mask(self.crc)))

    @classmethod
    def decode(cls, data: bytes) -> Entry:
        fields = dict(parse_message(data))
        shape = tuple(dict(parse_message(d)).get(1, 0) for n, d in parse_message(fields.get(2, b"")) if n == 2)
        if 7 in fields:
            raise DataLossError("The checkpoint holds a tensor saved in slices, which popjit does not read.")
        code = fields.get(1, 0)
        if code not in _NUMPY_OF:
            raise DataLossError(f"The checkpoint holds a tensor of DataType {code}, which popjit does not read.")
        return cls(_NUMPY_OF[code], shape, fields.get(4, 0), fields.get(5, 0), unmask(fields.get(6, 0)))


def _header() -> bytes:
    return field_varint(1, 1) + field_message(3, field_varint(1, 1))  # one shard, little-endian, version 1


# -- the SSTable --------------------------------------------------------------------------------------------
def _block(entries: list[tuple[bytes, bytes]]) -> bytes:
    out, restarts, previous = bytearray(), [], b""
    for i, (key, value) in enumerate(entries):
        shared = 0
        if i % _RESTART_INTERVAL:
            limit = min(len(previous), len(key))
            while shared < limit and previous[shared] == key[shared]:
                shared += 1
        else:
            restarts.append(len(out))
        out += varint(shared) + varint(len(key) - shared) + varint(len(value)) + key[shared:] + value
        previous = key
    restarts = restarts or [0]
    return bytes(out) + b"".join(struct.pack("<I", r) for r in restarts) + struct.pack("<I", len(restarts))


def _handle(offset: int, size: int) -> bytes:
    return varint(offset) + varint(size)


def build_table(entries: list[tuple[bytes, bytes]]) -> bytes:
    """A LevelDB table of ``entries`` (sorted by key here), uncompressed."""
    out = bytearray()
    index: list[tuple[bytes, bytes]] = []

    def emit(block: bytes) -> tuple[int, int]:
        offset = len(out)
        out.extend(block + b"\x00" + struct.pack("<I", mask(crc32c(block + b"\x00"))))
        return offset, len(block)

    pending: list[tuple[bytes, bytes]] = []
    size = 0
    for key, value in sorted(entries):
        pending.append((key, value))
        size += len(key) + len(value) + 8
        if size >= _BLOCK_SIZE:
            index.append((key, _handle(*emit(_block(pending)))))
            pending, size = [], 0
    if pending:
        index.append((pending[-1][0], _handle(*emit(_block(pending)))))
    meta = emit(_block([]))
    index_handle = emit(_block(index))
    footer = _handle(*meta) + _handle(*index_handle)
    return bytes(out) + footer.ljust(40, b"\x00") + struct.pack("<Q", _MAGIC)


def _read_block(data: bytes, offset: int, size: int, path: str) -> list[tuple[bytes, bytes]]:
    if offset + size + 5 > len(data):
        raise DataLossError(f"Unable to read the checkpoint index {path}: a block lies past the end of the file "
                            "(truncated or not a checkpoint).")
    block = data[offset:offset + size]
    stored = struct.unpack_from("<I", data, offset + size + 1)[0]
    if data[offset + size] != 0 or unmask(stored) != crc32c(data[offset:offset + size + 1]):
        raise DataLossError(f"Unable to read the checkpoint index {path}: block checksum mismatch (the file is "
                            "damaged).")
    count = struct.unpack_from("<I", block, len(block) - 4)[0]
    end = len(block) - 4 - 4 * count
    out, pos, key = [], 0, b""
    while pos < end:
        shared, pos = read_varint(block, pos)
        unshared, pos = read_varint(block, pos)
        length, pos = read_varint(block, pos)
        key = key[:shared] + block[pos:pos + unshared]
        pos += unshared
        out.append((key, block[pos:pos + length]))
        pos += length
    return out


def read_table(path: str) -> list[tuple[bytes, bytes]]:
    """Every ``(key, value)`` of the LevelDB table at ``path``, in key order."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < _FOOTER_SIZE or struct.unpack_from("<Q", data, len(data) - 8)[0] != _MAGIC:
        raise DataLossError(f"Unable to open table file {path}: not an sstable (bad magic number). The "
                            "checkpoint's index is damaged or is not a TensorFlow checkpoint.")
    footer = data[len(data) - _FOOTER_SIZE:]
    try:
        _, pos = read_varint(footer, 0)
        _, pos = read_varint(footer, pos)
        index_offset, pos = read_varint(footer, pos)
        index_size, _ = read_varint(footer, pos)
        out: list[tuple[bytes, bytes]] = []
        for _, handle in _read_block(data, index_offset, index_size, path):
            offset, pos = read_varint(handle, 0)
            size, _ = read_varint(handle, pos)
            out += _read_block(data, offset, size, path)
    except (ValueError, IndexError, struct.error) as e:
        raise DataLossError(f"Unable to read the checkpoint index {path}: {e} (the file is damaged).") from e
    return out


# -- tensors ------------------------------------------------------------------------------------------------
def _encode(value: Any) -> tuple[str, tuple[int, ...], bytes, int]:
    """``(dtype, shape, bytes, crc)`` of a NumPy value or a bytes string (a scalar string tensor)."""
    if isinstance(value, bytes | str):
        return ("string", (), *_string_bytes([value.encode() if isinstance(value, str) else value]))
    array = np.array(value, order="C", copy=None)
    name = array.dtype.name
    if name not in DTYPES:
        raise TypeError(f"A checkpoint cannot hold a tensor of dtype {name}")
    data = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
    return name, tuple(array.shape), data, crc32c(data)


def _string_bytes(elements: list[bytes]) -> tuple[bytes, int]:
    """A string tensor's bytes and CRC (over the lengths as uint32s, the masked length CRC, the strings)."""
    lengths = b"".join(varint(len(e)) for e in elements)
    crc = crc32c(b"".join(struct.pack("<I", len(e)) for e in elements))
    check = struct.pack("<I", mask(crc))
    crc = crc32c(check, crc)
    body = b"".join(elements)
    return lengths + check + body, crc32c(body, crc)


def write_bundle(prefix: str, tensors: dict[str, Any]) -> None:
    """Write ``tensors`` (name -> NumPy array, or bytes for a scalar string) as the checkpoint ``prefix``."""
    data = bytearray()
    entries = [(b"", _header())]
    for name in sorted(tensors):
        dtype, shape, raw, crc = _encode(tensors[name])
        entries.append((name.encode(), Entry(dtype, shape, len(data), len(raw), crc).encode()))
        data += raw
    directory = os.path.dirname(os.path.abspath(prefix))
    os.makedirs(directory, exist_ok=True)
    for suffix, content in ((DATA_SUFFIX, bytes(data)), (INDEX_SUFFIX, build_table(entries))):
        target = prefix + suffix
        tmp = os.path.join(directory, f".{os.path.basename(target)}.tmp{os.getpid()}")
        try:
            with open(tmp, "wb") as f:
                f.write(content)
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)


class BundleReader:
    """The tensors of the checkpoint ``prefix`` (its index read at once, tensors on request)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        index = prefix + INDEX_SUFFIX
        if not os.path.exists(index):
            raise NotFoundError(f"Unsuccessful TensorSliceReader constructor: Failed to find any matching files for "
                                f"{prefix}")
        table = read_table(index)
        if not table or table[0][0] != b"":
            raise DataLossError(f"Unable to read the checkpoint index {index}: it has no bundle header.")
        header = dict(parse_message(table[0][1]))
        if header.get(1, 1) != 1 or header.get(2, 0) != 0:
            raise DataLossError(f"The checkpoint {prefix} has {header.get(1)} shards or big-endian data, which popjit "
                                "does not read.")
        self.entries = {key.decode(): Entry.decode(value) for key, value in table[1:]}

    def keys(self) -> Iterator[str]:
        return iter(self.entries)

    def get(self, name: str) -> Any:
        """A tensor as a NumPy array (a string tensor as bytes, or an object array of bytes)."""
        if name not in self.entries:
            raise NotFoundError(f"Key {name} not found in checkpoint")
        entry = self.entries[name]
        path = self.prefix + DATA_SUFFIX
        try:
            with open(path, "rb") as f:
                f.seek(entry.offset)
                raw = f.read(entry.size)
        except FileNotFoundError as e:
            raise NotFoundError(f"Failed to find the data file {path} of the checkpoint {self.prefix}") from e
        value = _decode_strings(raw, entry.shape) if entry.dtype == "string" and len(raw) == entry.size else None
        if value is not None:
            crc = _string_bytes([value] if isinstance(value, bytes) else list(value.ravel()))[1]
        else:
            crc = crc32c(raw)
        if len(raw) != entry.size or crc != entry.crc:
            raise DataLossError(f"Checksum does not match for tensor {name} in {path}: the checkpoint is damaged.")
        if value is not None:
            return value
        return np.frombuffer(raw, np.dtype(entry.dtype).newbyteorder("<")).reshape(entry.shape).copy()


def _decode_strings(raw: bytes, shape: tuple[int, ...]) -> Any:
    count = int(np.prod(shape)) if shape else 1
    lengths, pos = [], 0
    for _ in range(count):
        n, pos = read_varint(raw, pos)
        lengths.append(n)
    pos += 4
    items = []
    for n in lengths:
        items.append(raw[pos:pos + n])
        pos += n
    return items[0] if not shape else np.array(items, dtype=object).reshape(shape)
