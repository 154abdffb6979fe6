"""Atomic file writes: a reader sees the old file or the new one, never half of one.

The data goes to a temp file (``NAME.<random>.tmp``) in the same directory, is flushed and
fsynced, then renamed over the target; the directory is fsynced too so the rename survives a
power cut. On any error the temp file is removed and the target is untouched.

Mode: the new file gets the mode a plain ``open(path, "w")`` would give it (``0o666`` less the
umask, or the directory's default ACL), because the temp file is created with mode ``0o666`` and
the kernel applies the umask, as for any file (``tempfile.mkstemp`` would leave ``0600``, and a
web server could not serve the report). Replacing an existing file keeps that file's permission
bits; its owner and group are not copied (the new file belongs to the writer).
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

_FLAGS = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
          | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
_ATTEMPTS = 100  # names tried before giving up, as tempfile does


def fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def existing_mode(path: Path) -> int | None:
    """The permission bits of the file at ``path`` (following a symlink); None if there is none."""
    try:
        info = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return stat.S_IMODE(info.st_mode) if stat.S_ISREG(info.st_mode) else None


def _create_temp(target: Path) -> tuple[int, Path]:
    """Create a new, empty temp file beside ``target`` with the umask applied by the kernel."""
    for _ in range(_ATTEMPTS):
        tmp = target.with_name(f"{target.name}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, _FLAGS, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temp file name beside {target}")


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` atomically; creates the parent directory.

    The final mode is the replaced file's, else ``0o666 & ~umask`` (see the module docstring).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    keep = existing_mode(target)
    fd, tmp = _create_temp(target)
    try:
        with os.fdopen(fd, "wb") as handle:
            if keep is not None:  # before any data is written: never readable more widely
                os.fchmod(handle.fileno(), keep)
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)
