"""The user's cache folder for what is slow to derive and safe to keep (``$KVLAB_CACHE``, else
``$XDG_CACHE_HOME/kvlab``, else ``~/.cache/kvlab``): entries keyed by a digest of everything they derive from, so a
stale one is never found, written whole (a temporary file renamed) or not at all. A folder that cannot be written
only means deriving every time, and so does a ``$KVLAB_CACHE`` that names no folder: the folder a user names is
used, never made (a mistyped name would leave folders about); the default one is made."""

import hashlib
import os
from pathlib import Path

__all__ = ["entry", "keep", "read"]


def folder():
    cache = os.environ.get("KVLAB_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "kvlab"
    )
    return Path(cache)


def entry(part, suffix, *keys):
    """The path of the entry of ``part`` (a subfolder) keyed by ``keys`` (str or bytes)."""
    digest = hashlib.sha256()
    for key in keys:
        digest.update(key if isinstance(key, bytes) else str(key).encode())
        digest.update(b"|")
    return folder() / part / f"{digest.hexdigest()[:32]}{suffix}"


def read(path):
    """The entry's bytes, or None."""
    try:
        return path.read_bytes()
    except OSError:
        return None


def keep(path, data):
    """Write ``data`` to ``path`` whole, or not at all."""
    try:
        path.parent.mkdir(parents=not os.environ.get("KVLAB_CACHE"), exist_ok=True)  # an entry's part: one level
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_bytes(data)
        os.replace(temporary, path)
    except OSError:
        pass
