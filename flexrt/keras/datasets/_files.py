"""Finding, downloading and safely reading the dataset files (Keras' ``get_file``, made strict).

``get_file(fname, origin, file_hash, untar)`` returns the path of a dataset file (or, with
``untar``, of the folder a tarball unpacks to), looking in this order:

1. ``$FLEXRT_DATA_DIR/<fname>``, when the variable is set;
2. Keras' cache, ``$KERAS_HOME/datasets/<fname>`` (``~/.keras/datasets/<fname>`` without
   ``KERAS_HOME``), so a file Keras already downloaded is reused under its Keras name;
3. with ``untar``, a tarball already in one of those folders (``<fname>.tar.gz``, Keras' name, or
   the name in the URL), unpacked into Keras' cache;
4. under the ``flexrt`` command (a model captured up to its ``compile``: its data is never read),
   the synthetic stand-in of ``flexrt.keras.datasets._synthetic``;
5. else a download from ``origin`` into Keras' cache: a temporary file with a progress bar on
   stderr, its md5 or sha256 (by the length of ``file_hash``) checked, then renamed into place so
   that a broken download never leaves a file behind.

Files found on disk are not hashed (users may keep their own copies); downloads always are. Every
failure is one ``DatasetError`` that names the file, every place it was looked for, where to put it
and the URL to fetch it from.

Pickled data never goes through plain ``pickle.load``: ``safe_unpickle`` allows exactly the globals
NumPy arrays are rebuilt from and refuses everything else, and ``load_npz`` reads ``.npz`` members
itself so that object arrays (pickles inside the archive) take the same road.

Entry points: ``get_file``, ``load_npz``, ``safe_unpickle``, ``DatasetError``, ``fetch`` (what
downloads; tests replace it).
"""

from __future__ import annotations

import codecs
import hashlib
import os
import pickle
import shutil
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
import zlib
from pathlib import Path, PurePosixPath
from typing import BinaryIO

import numpy as np

from flexrt.errors import FlexrtError
from flexrt.inputs import listing, short

try:  # NumPy >= 2 keeps its core in numpy._core; pickles name either spelling
    from numpy._core import multiarray as _multiarray
    from numpy._core import numeric as _numeric
except ImportError:  # pragma: no cover - NumPy 1.x
    from numpy.core import multiarray as _multiarray
    from numpy.core import numeric as _numeric

DATA_DIR_ENV_VAR = "FLEXRT_DATA_DIR"
KERAS_HOME_ENV_VAR = "KERAS_HOME"
FETCH_TIMEOUT_S = 60
CHUNK_BYTES = 1 << 20


class DatasetError(FlexrtError, OSError):
    """A dataset file is missing and could not be downloaded, or is corrupt or unsafe to read."""


# ---- where files live ----------------------------------------------------------------------------

def keras_cache_dir() -> Path:
    """Keras' dataset cache: ``$KERAS_HOME/datasets``, else ``~/.keras/datasets`` (read at each call)."""
    home = os.environ.get(KERAS_HOME_ENV_VAR)
    return (Path(home).expanduser() if home else Path.home() / ".keras") / "datasets"


def search_dirs() -> list[tuple[Path, str]]:
    """(folder, what it is) in the order files are looked for there."""
    dirs = []
    env = os.environ.get(DATA_DIR_ENV_VAR)
    if env:
        dirs.append((Path(env).expanduser(), f"${DATA_DIR_ENV_VAR}"))
    dirs.append((keras_cache_dir(), "Keras' cache"))
    return dirs


def _tarball_names(fname: str, origin: str) -> list[str]:
    names = [fname + ".tar.gz"]
    from_url = PurePosixPath(urllib.request.urlparse(origin).path).name
    if from_url and from_url not in names:
        names.append(from_url)
    return names


def get_file(fname: str, origin: str, file_hash: str | None = None, untar: bool = False) -> Path:
    """The local path of dataset file ``fname`` (a folder with ``untar``), downloaded if absent.

    See the module doc for the search order. ``file_hash`` is an md5 (32 hex digits) or sha256
    (64) of the downloaded file (the tarball with ``untar``).

    Example:
        >>> get_file("mnist.npz", "https://s3.amazonaws.com/img-datasets/mnist.npz")  # doctest: +SKIP
        PosixPath('/home/me/.keras/datasets/mnist.npz')
    """
    dirs = search_dirs()
    looked = [(d / fname, what) for d, what in dirs]
    for path, _ in looked:
        if (path.is_dir() if untar else path.is_file()):
            return path
    cache = keras_cache_dir()
    if untar:
        for d, what in dirs:
            for name in _tarball_names(fname, origin):
                if (d / name).is_file():
                    return extract_tar(d / name, cache, fname)
                looked.append((d / name, what))
    from flexrt.model import _capture
    if _capture.active() is not None:   # the flexrt command: no download, the data is never read
        from flexrt.keras.datasets._synthetic import synthetic_file
        synthetic = synthetic_file(fname)
        if synthetic is not None:
            return synthetic
    dest = cache / (fname + ".tar.gz" if untar else fname)
    try:
        download(origin, dest, file_hash)
    except DatasetError as e:
        raise DatasetError(_missing_message(fname, origin, looked, cache, untar, str(e))) from None
    return extract_tar(dest, cache, fname) if untar else dest


def _missing_message(fname: str, origin: str, looked, cache: Path, untar: bool, why: str) -> str:
    places = "; ".join(f"{p} ({what})" for p, what in looked)
    if untar:
        fix = (f"download {origin} and put it at {cache / (fname + '.tar.gz')}, or unpack it so that "
               f"{cache / fname} is a folder (or do either in the folder ${DATA_DIR_ENV_VAR} names)")
    else:
        fix = f"download {origin} and put it at {cache / fname} (or in the folder ${DATA_DIR_ENV_VAR} names)"
    return f"dataset file {fname!r} is missing: looked for {places}; {why}. To fix: {fix}"


# ---- downloading ---------------------------------------------------------------------------------

def fetch(url: str, out: BinaryIO, desc: str) -> None:
    """Copy ``url`` into ``out`` with a progress bar on stderr (network errors propagate)."""
    from tqdm import tqdm

    with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_S) as response:
        length = response.headers.get("Content-Length")
        total = int(length) if length and length.isdigit() else None
        with tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=desc, file=sys.stderr,
                  leave=False) as bar:
            while True:
                chunk = response.read(CHUNK_BYTES)
                if not chunk:
                    break
                out.write(chunk)
                bar.update(len(chunk))


def hash_algorithm(file_hash: str) -> str:
    """``"sha256"`` for a 64-digit hash, else ``"md5"`` (Keras' ``get_file`` rule)."""
    return "sha256" if len(file_hash) == 64 else "md5"


def file_digest(path: Path, algorithm: str) -> str:
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK_BYTES), b""):
            h.update(chunk)
    return h.hexdigest()


def download(origin: str, dest: Path, file_hash: str | None = None) -> None:
    """Fetch ``origin`` to ``dest`` atomically (temporary file, hash check, ``os.replace``)."""
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    except OSError as e:
        raise DatasetError(f"cannot create a file in {dest.parent} to download into ({e.strerror or e})") from None
    try:
        try:
            with os.fdopen(fd, "wb") as out:
                fetch(origin, out, dest.name)
        except urllib.error.URLError as e:
            raise DatasetError(f"downloading it from {origin} failed ({getattr(e, 'reason', e)}; "
                               f"no network, or the file moved)") from None
        except (OSError, ValueError) as e:  # a dropped connection, a bad URL, a full disk
            raise DatasetError(f"downloading it from {origin} failed ({type(e).__name__}: {e})") from None
        if file_hash:
            algorithm = hash_algorithm(file_hash)
            got = file_digest(Path(tmp), algorithm)
            if got != file_hash.lower():
                raise DatasetError(f"the file downloaded from {origin} has {algorithm} {got}, expected "
                                   f"{file_hash} (a corrupt or changed download; it was not kept)")
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


# ---- tarballs ------------------------------------------------------------------------------------

def _check_member(member: tarfile.TarInfo, tar_path: Path) -> None:
    parts = PurePosixPath(member.name).parts
    if member.name.startswith(("/", "\\")) or os.path.isabs(member.name) or ".." in parts:
        raise DatasetError(f"tarball {tar_path} holds {member.name!r}, a path outside the folder it unpacks to; "
                           f"refusing to unpack it (delete it and download it again)")
    if not (member.isfile() or member.isdir()):
        raise DatasetError(f"tarball {tar_path} holds {member.name!r}, which is a link or a special file; "
                           f"a dataset tarball holds only files and folders, refusing to unpack it")


def extract_tar(tar_path: Path, into: Path, fname: str) -> Path:
    """Unpack ``tar_path`` (whose top folder is ``fname``) into ``into``; return ``into / fname``.

    Members with absolute paths, ``..``, links or special files are refused; the folder appears
    whole or not at all (unpacked beside it, then renamed)."""
    try:
        into.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=into, prefix=f".{fname}.", suffix=".part"))
    except OSError as e:
        raise DatasetError(f"cannot create a folder in {into} to unpack {tar_path} into ({e.strerror or e})") from None
    try:
        try:
            with tarfile.open(tar_path, "r:*") as tar:
                members = tar.getmembers()
                for m in members:
                    _check_member(m, tar_path)
                extra = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
                tar.extractall(tmp, members=members, **extra)
        except (tarfile.TarError, EOFError, zlib.error, OSError) as e:
            if isinstance(e, DatasetError):
                raise
            raise DatasetError(f"tarball {tar_path} is corrupt or truncated ({type(e).__name__}: {e}); "
                               f"delete it and download it again") from None
        if not (tmp / fname).is_dir():
            top = sorted({PurePosixPath(m.name).parts[0] for m in members if m.name})
            raise DatasetError(f"tarball {tar_path} does not unpack to a folder {fname!r}; its top level holds "
                               f"{listing(top) or 'nothing'}")
        target = into / fname
        if not target.exists():
            os.replace(tmp / fname, target)
        return target
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---- reading pickles and .npz files safely -------------------------------------------------------

# The only globals a pickled NumPy array (any protocol, Python 2 or 3) needs; none runs user code.
_SAFE_GLOBALS = {
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("numpy.core.multiarray", "_reconstruct"): _multiarray._reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _multiarray._reconstruct,
    ("numpy.core.multiarray", "scalar"): _multiarray.scalar,
    ("numpy._core.multiarray", "scalar"): _multiarray.scalar,
    ("numpy.core.numeric", "_frombuffer"): _numeric._frombuffer,
    ("numpy._core.numeric", "_frombuffer"): _numeric._frombuffer,
    ("_codecs", "encode"): codecs.encode,  # Python 3's protocol-2 pickles spell bytes this way
}


class SafeUnpickler(pickle.Unpickler):
    """An unpickler that rebuilds NumPy arrays, dicts, lists, strings and numbers, and nothing else."""

    def __init__(self, file, where: str, **kwargs) -> None:
        super().__init__(file, **kwargs)
        self.where = where

    def find_class(self, module: str, name: str):
        obj = _SAFE_GLOBALS.get((module, name))
        if obj is None:
            allowed = listing(f"{m}.{n}" for m, n in _SAFE_GLOBALS)
            raise DatasetError(f"{self.where}: refusing to unpickle {module}.{name}: a dataset file may only "
                               f"hold NumPy arrays and plain Python values (allowed globals: {allowed}); the "
                               f"file is not what it claims to be, so it was not loaded")
        return obj


def safe_unpickle(f: BinaryIO, where: str, encoding: str = "bytes"):
    """One object unpickled from ``f`` with ``SafeUnpickler``; every failure is a ``DatasetError``."""
    try:
        return SafeUnpickler(f, where, encoding=encoding).load()
    except DatasetError:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError,
            UnicodeDecodeError, OSError, zlib.error, zipfile.BadZipFile) as e:
        raise DatasetError(f"{where} is corrupt or truncated ({type(e).__name__}: {short(str(e))}); delete it "
                           f"and download it again") from None


def _npy_header(f: BinaryIO) -> tuple[tuple, bool, np.dtype]:
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(f)
    if version in ((2, 0), (3, 0)):  # 3.0 differs only in allowing UTF-8 field names
        return np.lib.format.read_array_header_2_0(f)
    raise ValueError(f"unknown .npy format version {version[0]}.{version[1]}")


def _read_member(zf: zipfile.ZipFile, member: str, where: str) -> np.ndarray:
    with zf.open(member) as f:
        shape, _, dtype = _npy_header(f)
        if dtype.hasobject:  # numpy stores object arrays as a pickle after the header
            arr = safe_unpickle(f, where, encoding="latin1")  # numpy's advice for Python 2 arrays
            if not isinstance(arr, np.ndarray) or arr.shape != tuple(shape):
                raise DatasetError(f"{where}: the header promises an array of shape {tuple(shape)}, the data "
                                   f"holds {short(getattr(arr, 'shape', type(arr).__name__))}")
            return arr
    with zf.open(member) as f:
        return np.lib.format.read_array(f, allow_pickle=False)


def load_npz(path: Path, keys, what: str) -> dict:
    """The arrays ``keys`` of the ``.npz`` file ``path`` (``what`` names it: "MNIST file").

    Plain arrays are read as ``np.load`` reads them; object arrays go through ``safe_unpickle``.
    A missing key, a corrupt archive or a refused pickle is a ``DatasetError`` naming the file."""
    try:
        with zipfile.ZipFile(path) as zf:
            names = set(zf.namelist())
            out = {}
            for key in keys:
                member = key + ".npy"
                if member not in names:
                    have = sorted(n[:-4] for n in names if n.endswith(".npy"))
                    raise DatasetError(f"{what} {path} has no array {key!r}; it has {listing(have) or 'none'} "
                                       f"(not the expected file: delete it and download it again)")
                out[key] = _read_member(zf, member, f"{what} {path} (array {key!r})")
            return out
    except DatasetError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError, OSError, zlib.error) as e:
        raise DatasetError(f"{what} {path} is corrupt or truncated ({type(e).__name__}: {short(str(e))}); "
                           f"delete it and download it again") from None
