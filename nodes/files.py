"""Writing files so that a crash, a kill or a full disk never leaves a torn or empty file behind.

Lives here: `atomic_write`, `atomic_write_text`, `atomic_write_bytes`, `write_new_output`, `check_prefix`, `clean_stale_temp_files`,
`temp_path_for`, `fsync_dir`, `write_target_problem`. Imports only the standard library.

Every write goes to a temporary name in the target's folder, is fsynced, then renamed into place and the
folder fsynced (so the rename itself survives a power cut). Temporary names carry our marker and the
writer's pid, `.<name>.nodeloom-<pid>-<random>.tmp`, so a later write into the same folder can delete the
ones whose process is gone (left by kill -9) without touching a concurrent run's. New files get
0666 & ~umask (0644 under the usual umask), never mkstemp's 0600 or os.open's default 0755.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from collections.abc import Callable
from pathlib import Path

TEMP_MARKER = "nodeloom"
# Ours: ".<name>.nodeloom-<pid>-<hex>.tmp"; older versions wrote mkstemp's ".<name>.<8 chars>.tmp".
_OURS = re.compile(r"\..+\.nodeloom-(\d+)-[0-9a-f]+\.tmp")
LEGACY_STALE_AFTER_S = 3600.0  # legacy names carry no pid: only delete them once clearly abandoned


def write_target_problem(path: Path) -> str | None:
    """Why no file can ever be written at `path` (a folder there, a file where a folder must be), or None.

    Asked before a run, so `--report out.txt/r.json` is refused at once rather than after the work is done.
    """
    path = Path(path)
    if path.is_dir():
        return f"{path} is a folder; give a file name"
    for parent in path.parents:
        if parent.exists():
            return None if parent.is_dir() else f"{parent} is a file, so {path} cannot be written under it"
    return None


def check_prefix(prefix: str) -> None:
    """A file-name prefix must name a file in the output folder, never a path out of it."""
    problem = prefix_problem(prefix)
    if problem is not None:
        raise ValueError(f"field 'prefix': {problem}")


def prefix_problem(prefix: object) -> str | None:
    """Why `prefix` cannot start an output file name, or None (used at validation and when saving)."""
    if not isinstance(prefix, str):
        return None  # the parameter's type check reports it
    shown = repr(prefix) if len(prefix) <= 80 else f"{prefix[:80]!r}… ({len(prefix):,} characters)"
    if not prefix or prefix in (".", "..") or any(c in prefix for c in "/\\\0") or ".." in prefix:
        return f"{shown} must be a plain file name (no folders, no '..')"
    if len(prefix.encode("utf-8", "surrogatepass")) > 200:
        return f"{shown} is too long for a file name (at most 200 bytes, a number follows)"
    if any(ord(c) < 32 for c in prefix) or re.search("[\ud800-\udfff]", prefix):
        return f"{shown} contains control characters or invalid Unicode"
    return None


def _umask_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def temp_path_for(path: Path) -> Path:
    return path.parent / f".{path.name}.{TEMP_MARKER}-{os.getpid()}-{secrets.token_hex(4)}.tmp"


def fsync_dir(folder: Path) -> None:
    """Make a rename in `folder` durable; a no-op where folders cannot be opened (Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # exists but belongs to someone else
    return True


def clean_stale_temp_files(folder: Path, legacy_target: str | None = None) -> list[Path]:
    """Delete our temporary files in `folder` whose writer is gone; returns what was removed.

    `legacy_target`: also delete, once an hour old, the pid-less `.<legacy_target>.XXXXXXXX.tmp` files that
    versions before the marker left for that one file (never other programs' files in, say, a home folder).
    """
    legacy = re.compile(rf"\.{re.escape(legacy_target)}\.[a-z0-9_]{{8}}\.tmp") if legacy_target else None
    removed: list[Path] = []
    try:
        entries = list(Path(folder).iterdir())
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        name = entry.name
        if not name.endswith(".tmp") or not name.startswith("."):
            continue
        ours = _OURS.fullmatch(name)
        try:
            if ours:
                stale = not _alive(int(ours.group(1)))
            elif legacy is not None and legacy.fullmatch(name):
                stale = now - entry.stat().st_mtime > LEGACY_STALE_AFTER_S
            else:
                continue
            if stale and entry.is_file():
                entry.unlink()
                removed.append(entry)
        except OSError:
            continue  # raced with its owner or another cleaner: fine either way
    return removed


def _write_temp(path: Path, write: Callable[[Path], None], mode: int) -> Path:
    tmp = temp_path_for(path)
    # Created by us with the final mode, so nothing else can open it in between.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    os.close(fd)
    try:
        os.chmod(tmp, mode)  # os.open's mode is masked by the umask already; chmod keeps an old file's mode
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def atomic_write_text(path: Path, text: str) -> None:
    """Write to a temp file in the same folder, fsync, rename over the target: never a torn file."""
    atomic_write(path, lambda p: p.write_text(text, encoding="utf-8"))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """`atomic_write_text` for bytes."""
    atomic_write(path, lambda p: p.write_bytes(data))


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """`write(tmp_path)` produces the content (a PIL save, a text); it replaces `path` only once complete."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_temp_files(path.parent, legacy_target=path.name)
    try:
        mode = path.stat().st_mode & 0o777  # keep the permissions the file had
    except FileNotFoundError:
        mode = _umask_mode()
    tmp = _write_temp(path, write, mode)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_new_output(folder: Path, prefix: str, suffix: str, write: Callable[[Path], None]) -> Path:
    """Write `prefix_NNNNN.suffix` in `folder`, the first free number, never overwriting anything.

    `write(tmp_path)` produces the file's content under a temporary name; only a complete file ever
    appears under the final name (a failed write leaves nothing), created exclusively via a hard link so
    two runs saving at once never clobber each other.
    """
    check_prefix(prefix)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    clean_stale_temp_files(folder)
    existing = [p.stem.removeprefix(prefix + "_") for p in folder.glob(f"{glob_escape(prefix)}_*{suffix}")]
    n = max((int(s) for s in existing if s.isdigit()), default=0) + 1
    tmp = _write_temp(folder / f"{prefix}{suffix}", write, _umask_mode())
    try:
        while True:
            path = folder / f"{prefix}_{n:05d}{suffix}"
            try:
                os.link(tmp, path)  # fails if the name is taken: an exclusive, atomic "rename"
            except FileExistsError:
                n += 1
                continue
            except OSError:
                # No hard links here (some network/FUSE file systems): reserve the name, then replace it.
                try:
                    os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
                except FileExistsError:
                    n += 1
                    continue
                os.replace(tmp, path)
            break
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(folder)
    return path


def glob_escape(text: str) -> str:
    """`text` with glob metacharacters made literal (a prefix like `run[1]`)."""
    return re.sub(r"([*?\[])", r"[\1]", text)
