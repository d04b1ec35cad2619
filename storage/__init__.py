"""Storage layer: atomic writes, sharded Parquet tables with manifests, content hashes.

Plain library: never imports prefect.
"""
from storage.atomic import atomic_path, atomic_write_bytes, atomic_write_text, check_writable_dir
from storage.hashing import file_sha256, json_sha256, text_sha256
from storage.tables import (
    MANIFEST_NAME,
    SCHEMA_VERSION,
    TableError,
    manifest_fingerprint,
    read_manifest,
    read_table,
    write_table,
)
from storage.fingerprint import path_fingerprint

__all__ = [
    "MANIFEST_NAME",
    "SCHEMA_VERSION",
    "TableError",
    "atomic_path",
    "atomic_write_bytes",
    "atomic_write_text",
    "check_writable_dir",
    "file_sha256",
    "json_sha256",
    "manifest_fingerprint",
    "path_fingerprint",
    "read_manifest",
    "read_table",
    "text_sha256",
    "write_table",
]
