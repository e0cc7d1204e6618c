"""Crash-safe file writes: write to a temporary file in the same folder, fsync, rename.

A reader sees either the old file or the new one, never a partial write (POSIX ``rename`` is
atomic within a file system); the folder is fsynced too so the rename survives a power loss.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def check_writable_file(path: str | os.PathLike, *, name: str = "output") -> Path:
    """Refuse, before any work, an output path that is a folder, sits in a missing folder, or
    cannot be written (``InvalidInputError`` naming ``name``, e.g. the flag)."""
    from pure_dp_mf.errors import InvalidInputError

    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise InvalidInputError(f"{name} {target} is a folder, not a file")
    if not folder.is_dir():
        raise InvalidInputError(f"cannot write {name} {target}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise InvalidInputError(f"cannot write {name} {target}: permission denied")
    return target


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Replace ``path`` by ``data`` atomically and durably (a folder, a missing folder or a
    read-only place is refused first, with ``InvalidInputError``)."""
    target = check_writable_file(path, name="file")
    folder = target.parent if str(target.parent) else Path(".")
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, target)
    except BaseException as error:
        if os.path.exists(temporary):
            os.unlink(temporary)
        if isinstance(error, OSError) and error.filename is None:  # a full disk: name the file it was for
            raise OSError(error.errno, error.strerror, str(target)) from None
        raise
    directory = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """``atomic_write_bytes`` for UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"))
