"""Load-time trust of an index version (SPEC §7, §9): :func:`verify_version` checks every file of a version the
way serving loads it, before ``flows.serve`` starts on it and before ``flows.versions rollback`` switches to it.

Checked: the manifest's shape (:func:`retrieval.versions.check_manifest`, ``parts`` included); the sha256 of
every core file the manifest records (``core_files``: ``index.faiss``, ``chunks.parquet``, ``embeddings.npy``,
the BM25 and fusion folders; a version published before they were recorded says so in ``unverified``); the
FAISS header against the manifest; ``embeddings.npy`` a finite float32 matrix of the version's dimension; the
pinned encoder's content id (:func:`retrieval.pinning.verify_encoder`); every installed part's file and the
weights files its record names against their sha256; and each part's ``info.provenance`` (the encoder and
segmenter it was fitted with) against the version's identity (:func:`retrieval.parts.version_identity`), so a
part for another encoder whose hash was rewritten in the manifest is refused at load, not only at publication.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import numpy as np

from storage.hashing import file_sha256

_ROWS = 65_536  # rows of embeddings.npy checked at once (bounded memory)


@dataclass
class VerifyReport:
    """What :func:`verify_version` found: ``problems`` (one line each; empty: the version serves as published),
    ``checked`` (what was checked), ``unverified`` (what the manifest records no hash for)."""

    version: str
    problems: list[str] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    unverified: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        """One line: ``verified`` or the first problem (cut to 400 chars) and how many more."""
        if self.ok:
            return "verified" + (f" (not recorded: {', '.join(self.unverified)})" if self.unverified else "")
        more = f" (+{len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
        first = self.problems[0] if len(self.problems[0]) <= 400 else self.problems[0][:400] + "..."
        return f"index {self.version}: {first}{more}"


def verify_version(index_root: str | os.PathLike, version: str) -> VerifyReport:
    """Check every file of ``version`` under ``index_root`` (module docstring); never raises for a damaged
    version, the report lists its problems. Reads every file once (sha256: about 3 s per GB on one busy core)."""
    from retrieval.versions import IndexLoadError, read_manifest

    root, rep = Path(index_root), VerifyReport(str(version)[:80])
    try:
        manifest = read_manifest(root, version)
    except (OSError, IndexLoadError) as exc:
        rep.problems.append(str(exc))
        return rep
    vdir = root / version
    for check in (_core, _faiss, _embeddings, _encoder, _parts):
        try:
            check(root, vdir, manifest, rep)
        except (OSError, ValueError, RuntimeError) as exc:  # a check that cannot read what it checks
            rep.problems.append(f"{check.__name__.strip('_')}: {str(exc)[:200]}")
    return rep


def _core(root: Path, vdir: Path, manifest: dict, rep: VerifyReport) -> None:
    from retrieval.versions import CORE_FILES

    core = manifest.get("core_files")
    if core is None:
        rep.unverified.append("core files (" + ", ".join(CORE_FILES) + ", sparse/, fusion/: published before "
                              "their sha256 was recorded)")
        return
    if not isinstance(core, dict):
        rep.problems.append("manifest field core_files is not an object of file -> sha256")
        return
    for rel, sha in core.items():
        p = PurePosixPath(str(rel))
        if not isinstance(sha, str) or p.is_absolute() or ".." in p.parts:
            rep.problems.append(f"manifest core_files entry {str(rel)[:80]!r} is not a file of the version")
            continue
        f = vdir / rel
        if not f.is_file():
            rep.problems.append(f"core file {rel} is missing")
        elif file_sha256(f) != sha:
            rep.problems.append(f"core file {rel} changed since the version was published (sha256 mismatch)")
        else:
            rep.checked.append(rel)


def _faiss(root: Path, vdir: Path, manifest: dict, rep: VerifyReport) -> None:
    from retrieval.versions import check_faiss_file, check_index_matches

    path = vdir / "index.faiss"
    check_index_matches(check_faiss_file(path), manifest, path)


def _embeddings(root: Path, vdir: Path, manifest: dict, rep: VerifyReport) -> None:
    path = vdir / "embeddings.npy"
    if not path.is_file():
        return
    arr = np.load(path, mmap_mode="r", allow_pickle=False)
    dim = manifest.get("dim")
    if arr.ndim != 2 or arr.dtype != np.float32 or (dim is not None and arr.shape[1] != dim):
        rep.problems.append(f"embeddings.npy is {arr.dtype} {arr.shape}, not float32 (rows, {dim})")
        return
    for i in range(0, arr.shape[0], _ROWS):
        bad = ~np.isfinite(arr[i:i + _ROWS]).all(axis=1)
        if bad.any():
            rep.problems.append(f"embeddings.npy row {i + int(np.argmax(bad))} is not finite (NaN or inf): "
                                "rebuild the version")
            return
    rep.checked.append("embeddings finite")


def _encoder(root: Path, vdir: Path, manifest: dict, rep: VerifyReport) -> None:
    from retrieval.pinning import EncoderMismatchError, verify_encoder

    rel, mid = manifest.get("encoder_dir"), manifest.get("model_id")
    if not rel or not mid:
        rep.unverified.append("encoder (the manifest pins none)")
        return
    try:
        verify_encoder(root / rel, mid)
    except EncoderMismatchError as exc:
        rep.problems.append(str(exc).splitlines()[0][:300])
        return
    rep.checked.append("encoder")


def _parts(root: Path, vdir: Path, manifest: dict, rep: VerifyReport) -> None:
    from retrieval.parts import PartError, part_path, read_provenance, version_identity

    identity = version_identity(manifest)
    pins = _declared_pins()
    for name, rec in (manifest.get("parts") or {}).items():
        if "refused" in rec:
            continue
        try:
            f = part_path(vdir, manifest, name)
            for side, sha in (rec.get("files") or {}).items():
                if Path(side).name != side or not (vdir / side).is_file() or file_sha256(vdir / side) != sha:
                    raise PartError(f"{name} file {side[:80]} is missing or changed since the version was "
                                    "published (sha256 mismatch)")
            if f.suffix == ".json":
                _provenance(name, read_provenance(f, name), rec, identity, pins.get(name, ()))
        except PartError as exc:
            rep.problems.append(str(exc).removeprefix(f"index {manifest.get('version')}: "))
            continue
        rep.checked.append(f"part {name}")


def _provenance(name: str, prov: dict, rec: dict, identity: dict, pins: tuple[str, ...]) -> None:
    """Raise unless the part file's provenance matches the version's identity on its declared pins and on every
    identity key it names, and matches the provenance its manifest record holds."""
    from retrieval.parts import PartError

    keys = dict.fromkeys([*pins, *(k for k in prov if k in identity)])
    wrong = [f"{k} {str(prov.get(k))[:80]!r} (this version: {str(identity.get(k))[:80]!r})" for k in keys
             if prov.get(k) != identity.get(k)]
    if wrong:
        raise PartError(f"{name} was fitted with another " + "; ".join(wrong) + ": roll back or rebuild")
    if isinstance(rec.get("provenance"), dict) and rec["provenance"] != prov:
        raise PartError(f"{name}: its file's provenance is not the one recorded at publication")


def _declared_pins() -> dict[str, tuple[str, ...]]:
    """``{part name: pins}`` of the declared parts (:mod:`retrieval.serving_parts`); {} when the declarations
    do not resolve (then every identity key a file names is still checked)."""
    try:
        from retrieval.serving_parts import serving_parts

        return {p.name: tuple(p.pins) for p in serving_parts()}
    except (ImportError, AttributeError, ValueError):
        return {}


def serving_problem(index_root: str | os.PathLike) -> str | None:
    """The one-line reason the version ``index/CURRENT`` names must not be served (:func:`verify_version`), or
    None when it verifies or no index is published (the loader then says so)."""
    from retrieval.versions import IndexLoadError, current_version

    try:
        version = current_version(index_root)
    except IndexLoadError as exc:
        return str(exc)
    if version is None or not (Path(index_root) / version).is_dir():
        return None
    rep = verify_version(index_root, version)
    return None if rep.ok else f"{rep.summary()}: not serving it (roll back: python -m flows.versions rollback vN)"
