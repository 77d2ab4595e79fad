"""Files written safely and checked: what plans and engines' artifacts are made of.

Contract:
- `install`/`write_bytes` never rewrite a file in place (a loaded shared object is mapped into
  the process; an interrupted copy leaves the old file) and never write through a link: each
  writes an exclusive temporary of a random name (`O_CREAT|O_EXCL`, which a planted symbolic
  link fails) beside the destination and renames it over the destination (a link there is
  replaced, not followed); with `root`, the destination's folder must lie inside `root` once
  every link is resolved. Two processes saving the same file each rename a whole file of
  their own: the last one wins, neither fails.
- `inside(directory, name)` is a plan's file: a relative name, no `..`, that stays inside the
  plan folder with every symbolic link resolved; anything else a one-line PlanError.
- `verified_bytes` reads a file once and checks the sha256 of the very bytes it returns;
  `sealed_copy` puts bytes where no other process can change them (a sealed memfd on Linux),
  so native code is loaded from the bytes whose digest was checked, not from a path a racing
  writer can swap between the check and the load (issue 76).
- `verified` raises one-line PlanErrors; `read_npy` reads a user's .npy file (never a pickle)
  or says in one line what it is instead; `distinct_stems` gives outputs file names that
  never collide.
- `user_path` is a path the API was given (a non-empty str or os.PathLike), `creatable` one a
  file or folder can be made at (no file stands where a folder above it must be): anything
  else one line of the caller's error type, before any work that would write there.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from woodpecker.errors import PlanError, WoodpeckerError


def user_path(value: object, what: str, error: type[WoodpeckerError] = WoodpeckerError) -> Path:
    """`value`, the path given for `what`, as a Path; anything but a non-empty str or
    os.PathLike of a str is one `error` line."""
    try:
        text = os.fspath(value)
    except TypeError:
        text = None
    if not isinstance(text, str) or not text:
        shown = repr(value) if len(repr(value)) <= 60 else f"a {type(value).__name__}"
        raise error(f"{what} must be a path (a str or os.PathLike), got {shown}")
    return Path(text)


def creatable(path: Path, what: str, error: type[WoodpeckerError] = WoodpeckerError) -> Path:
    """`path`, where a file or folder can be made at it, or one `error` line naming the file
    that stands where a folder above it must be."""
    for up in path.absolute().parents:
        if up.exists():
            if not up.is_dir():
                raise error(f"{what} {path}: {up} is a file, not a folder")
            break
    return path


def sha256_file(path: "str | os.PathLike") -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _temporary(dst: Path, root: "Path | None"):
    """An exclusive new file beside `dst` (an open binary file object and its path)."""
    parent = dst.parent
    if root is not None:
        confine(root, parent, f"folder {parent}")
    parent.mkdir(parents=True, exist_ok=True)
    if root is not None:
        confine(root, parent, f"folder {parent}")
    fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{dst.name}.", suffix=".tmp")
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)   # as a plain open() would have made it
    return os.fdopen(fd, "wb"), Path(tmp)


def _move_into_place(tmp: Path, dst: Path) -> None:
    try:
        os.replace(tmp, dst)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def install(src: Path, dst: Path, root: "Path | None" = None) -> Path:
    """Copy `src` to `dst` through an exclusive temporary (nothing to do when they are one
    file); see the module's contract."""
    if not (dst.exists() and src.resolve() == dst.resolve()):
        f, tmp = _temporary(dst, root)
        try:
            with f, open(src, "rb") as s:
                shutil.copyfileobj(s, f)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        _move_into_place(tmp, dst)
    return dst


def write_bytes(dst: Path, data: bytes, root: "Path | None" = None) -> Path:
    """Write `data` to `dst` through an exclusive temporary; see the module's contract."""
    f, tmp = _temporary(dst, root)
    try:
        with f:
            f.write(data)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _move_into_place(tmp, dst)
    return dst


def writer(dst: Path, root: "Path | None" = None):
    """`(file, commit)`: an exclusive temporary to write `dst`'s bytes into, and a function
    that closes it and moves it into place (for a file written piece by piece)."""
    f, tmp = _temporary(dst, root)

    def commit(keep: bool = True) -> Path:
        f.close()
        if keep:
            _move_into_place(tmp, dst)
        else:
            tmp.unlink(missing_ok=True)
        return dst

    return f, tmp, commit


def confine(root: Path, path: Path, what: str) -> Path:
    """`path`, after checking it lies inside `root` with every symbolic link resolved."""
    if not path.resolve().is_relative_to(root.resolve()):
        raise PlanError(f"{what} leaves the plan folder {root} (through a symbolic link)")
    return path


def inside(directory: Path, name: str, what: str) -> Path:
    """`directory / name` for a plain relative `name` that stays inside `directory` — no
    absolute path, no `..`, no symbolic link leading out; a PlanError otherwise (a plan names
    only its own files)."""
    if not isinstance(name, str) or "\0" in name:
        raise PlanError(f"plan.json: {what} {name!r} is not a file inside the plan folder")
    rel = Path(name)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise PlanError(f"plan.json: {what} {name!r} is not a file inside the plan folder")
    return confine(directory, directory / rel, f"plan.json: {what} {name!r}")


def plain_name(name: str, what: str) -> str:
    """`name`, a file name of one component (no folder, no `..`); a PlanError otherwise."""
    if not isinstance(name, str) or not name or name in (".", "..") or "/" in name \
            or "\\" in name or "\0" in name:
        raise PlanError(f"plan.json: {what} {name!r} is not a file name")
    return name


def _open_plan_file(path: Path, what: str) -> int:
    """A descriptor of `path` for reading, not through a symbolic link as its last component;
    a one-line PlanError where it is missing or unreadable."""
    try:
        return os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        raise PlanError(f"plan {what} missing: {path}") from None
    except OSError as e:
        raise PlanError(f"cannot read plan {what} {path}: {e.strerror}") from None


def _differs(path: Path, what: str) -> PlanError:
    return PlanError(f"{path} does not match plan.json (sha256 differs): {what} edited or "
                     "corrupted")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _seal(fd: int) -> None:
    """No more writes, growth or shrinking of memfd `fd`, for anyone."""
    import fcntl

    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK |
                fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE)


def verified_bytes(path: Path, sha256: str | None, what: str) -> bytes:
    """The bytes of `path`, read once, whose sha256 is the one recorded (a PlanError for a
    missing file or other bytes). A symbolic link as the last component is refused."""
    with os.fdopen(_open_plan_file(path, what), "rb") as f:
        data = f.read()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise _differs(path, what)
    return data


# The sealed copies of native code made so far, by sha256: their file descriptors stay open
# for the life of the process (dlopen caches a library by its path; a closed descriptor's
# number, reused, would name another library by a path it already knows), and the same
# bytes loaded twice are one copy.
_SEALED: dict[str, Path] = {}
_SEALED_LOCK = threading.Lock()


def sealed_copy(data: bytes, name: str) -> Path:
    """A path to a private copy of `data` no other process can change: a sealed memfd
    (`/proc/self/fd/N`, Linux), else a read-only file in a private temporary folder."""
    digest = hashlib.sha256(data).hexdigest()
    with _SEALED_LOCK:
        if digest in _SEALED:
            return _SEALED[digest]
        if hasattr(os, "memfd_create"):
            fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
            _write_all(fd, data)
            _seal(fd)
            path = Path(f"/proc/self/fd/{fd}")
        else:
            folder = Path(tempfile.mkdtemp(prefix="woodpecker-native-"))
            path = folder / f"{digest[:16]}-{name}"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o500)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        _SEALED[digest] = path
        return path


def verified(path: Path, sha256: str | None, what: str) -> Path:
    """`path`, after checking it exists and its sha256 is the one recorded."""
    if not path.is_file():
        raise PlanError(f"plan {what} missing: {path}")
    if sha256_file(path) != sha256:
        raise _differs(path, what)
    return path


@contextmanager
def sealed_file(path: Path, sha256: str | None, what: str) -> Iterator[Path]:
    """A path to a private copy of `path`'s bytes, checked against `sha256` as they are copied
    (a PlanError where they differ), that no other process can change while it is open (a
    sealed memfd on Linux, else a read-only file in a private temporary folder); closed when
    the block ends. For files a library reads by path (ONNX Runtime's and OpenVINO's step
    models), without holding their bytes in this process."""
    src = _open_plan_file(path, what)
    folder = None
    try:
        if hasattr(os, "memfd_create"):
            fd = os.memfd_create(path.name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
            copy = Path(f"/proc/self/fd/{fd}")
        else:
            folder = Path(tempfile.mkdtemp(prefix="woodpecker-step-"))
            copy = folder / path.name
            fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            h = hashlib.sha256()
            while chunk := os.read(src, 1 << 20):
                h.update(chunk)
                _write_all(fd, chunk)
            if h.hexdigest() != sha256:
                raise _differs(path, what)
            if folder is None:
                _seal(fd)
            yield copy
        finally:
            os.close(fd)
    finally:
        os.close(src)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def read_npy(name: str, path: str) -> np.ndarray:
    """One array from a .npy file (never pickled objects), or a one-line error that says what
    the file is instead."""
    try:
        with open(path, "rb") as f:
            head = f.read(6)
    except OSError as e:
        raise WoodpeckerError(f"cannot read input {name!r} from {path}: {e.strerror}") from None
    if head[:4] == b"PK\x03\x04":
        raise WoodpeckerError(f"input {name!r}: {path} is an .npz archive; give one .npy file "
                              "per input (np.save)")
    if head != b"\x93NUMPY":
        raise WoodpeckerError(f"input {name!r}: {path} is not a .npy file (np.save writes one)")
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise WoodpeckerError(f"cannot read input {name!r} from {path}: {e}") from None


def distinct_stems(names) -> list[str]:
    """A distinct file stem per output name: unsafe characters become "_", and a stem that
    another output already has (`a/b` and `a_b`) gets "-2", "-3", … (case-insensitively:
    some file systems are)."""
    taken: set[str] = set()
    out = []
    for name in names:
        base = "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "output"
        stem, k = base, 1
        while stem.lower() in taken:
            k += 1
            stem = f"{base}-{k}"
        taken.add(stem.lower())
        out.append(stem)
    return out
