"""flexrt.keras.datasets: FlexFlow's mnist / cifar10 / reuters loaders on files made here.

Every file is generated in Keras' own format inside ``tmp_path`` (used as ``KERAS_HOME`` or
``FLEXRT_DATA_DIR``); no test touches the network: ``fetch`` is wrapped so that only ``file://``
URLs (local files) can be downloaded, and the "no network" case replaces it with one that raises
``URLError``.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import tarfile
import urllib.error
import warnings
import zipfile

import numpy as np
import pytest

from flexrt.errors import ConfigError, FlexrtError
from flexrt.keras.datasets import DatasetError, _files, cifar, cifar10, mnist, reuters


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    """Keras' cache in tmp_path, no FLEXRT_DATA_DIR, and downloads of local files only."""
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras"))
    monkeypatch.delenv("FLEXRT_DATA_DIR", raising=False)
    real = _files.fetch

    def local_only(url, out, desc):
        assert url.startswith("file://"), f"a test tried to reach the network: {url}"
        real(url, out, desc)

    monkeypatch.setattr(_files, "fetch", local_only)


def cache(tmp_path):
    d = tmp_path / "keras" / "datasets"
    d.mkdir(parents=True, exist_ok=True)
    return d


def md5(path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


# ---- mnist --------------------------------------------------------------------------------------

def write_mnist(path, n_train=60000, n_test=10000, offset=0):
    rng = np.random.default_rng(offset)
    arrays = {"x_train": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
              "y_train": ((np.arange(n_train) + offset) % 10).astype(np.uint8),
              "x_test": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
              "y_test": ((np.arange(n_test) * 3 + offset) % 10).astype(np.uint8)}
    np.savez(path, **arrays)
    return arrays


def test_mnist_load_data_full_size_from_keras_cache(tmp_path):
    want = write_mnist(cache(tmp_path) / "mnist.npz")
    (x_train, y_train), (x_test, y_test) = mnist.load_data()
    assert x_train.shape == (60000, 28, 28) and x_train.dtype == np.uint8
    assert y_train.shape == (60000,) and y_train.dtype == np.uint8
    assert x_test.shape == (10000, 28, 28) and y_test.shape == (10000,)
    for name, got in zip(("x_train", "y_train", "x_test", "y_test"), (x_train, y_train, x_test, y_test)):
        np.testing.assert_array_equal(got, want[name])


def test_mnist_flexrt_data_dir_comes_before_keras_cache(tmp_path, monkeypatch):
    write_mnist(cache(tmp_path) / "mnist.npz", 20, 5, offset=1)
    mine = tmp_path / "mine"
    mine.mkdir()
    want = write_mnist(mine / "mnist.npz", 30, 6, offset=2)
    monkeypatch.setenv("FLEXRT_DATA_DIR", str(mine))
    (x_train, y_train), _ = mnist.load_data()
    assert x_train.shape == (30, 28, 28)
    np.testing.assert_array_equal(y_train, want["y_train"])
    (mine / "mnist.npz").unlink()  # absent there: Keras' cache is next
    (x_train, _), _ = mnist.load_data()
    assert x_train.shape == (20, 28, 28)


def test_mnist_default_cache_is_home_keras_without_keras_home(tmp_path, monkeypatch):
    monkeypatch.delenv("KERAS_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home" / ".keras" / "datasets").mkdir(parents=True)
    write_mnist(tmp_path / "home" / ".keras" / "datasets" / "mnist.npz", 7, 3)
    (x_train, _), (x_test, _) = mnist.load_data()
    assert (len(x_train), len(x_test)) == (7, 3)


def test_mnist_missing_without_network_names_every_place_and_the_url(tmp_path, monkeypatch):
    mine = tmp_path / "mine"
    monkeypatch.setenv("FLEXRT_DATA_DIR", str(mine))

    def no_network(url, out, desc):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(_files, "fetch", no_network)
    with pytest.raises(DatasetError) as e:
        mnist.load_data()
    msg = str(e.value)
    assert "'mnist.npz' is missing" in msg
    assert str(mine / "mnist.npz") in msg and "$FLEXRT_DATA_DIR" in msg
    assert str(cache(tmp_path) / "mnist.npz") in msg and "Keras' cache" in msg
    assert "https://s3.amazonaws.com/img-datasets/mnist.npz" in msg
    assert "name resolution" in msg and "put it at" in msg
    assert isinstance(e.value, FlexrtError)
    assert not any(cache(tmp_path).iterdir())  # no partial download left behind


def test_mnist_downloads_into_keras_cache_and_checks_md5(tmp_path, monkeypatch):
    src = tmp_path / "server" / "mnist.npz"
    src.parent.mkdir()
    want = write_mnist(src, 12, 4)
    monkeypatch.setattr(mnist, "ORIGIN", src.as_uri())
    monkeypatch.setattr(mnist, "FILE_HASH", md5(src))
    (x_train, _), _ = mnist.load_data()
    np.testing.assert_array_equal(x_train, want["x_train"])
    assert (cache(tmp_path) / "mnist.npz").read_bytes() == src.read_bytes()
    assert sorted(p.name for p in cache(tmp_path).iterdir()) == ["mnist.npz"]


def test_download_with_sha256_hash(tmp_path):
    src = tmp_path / "payload.bin"
    src.write_bytes(b"flexrt" * 1000)
    sha = hashlib.sha256(src.read_bytes()).hexdigest()
    path = _files.get_file("payload.bin", src.as_uri(), file_hash=sha)
    assert path == cache(tmp_path) / "payload.bin" and path.read_bytes() == src.read_bytes()


def test_download_checksum_mismatch_is_refused_and_not_kept(tmp_path, monkeypatch):
    src = tmp_path / "server" / "mnist.npz"
    src.parent.mkdir()
    write_mnist(src, 5, 5)
    monkeypatch.setattr(mnist, "ORIGIN", src.as_uri())
    with pytest.raises(DatasetError) as e:
        mnist.load_data()
    msg = str(e.value)
    assert "mnist.npz" in msg and f"md5 {md5(src)}" in msg and "expected 8a61469f7ea1b51cbae51d4f78837e45" in msg
    assert not (cache(tmp_path) / "mnist.npz").exists()
    assert not any(cache(tmp_path).iterdir())


def test_mnist_truncated_file_is_a_clear_error(tmp_path):
    path = cache(tmp_path) / "mnist.npz"
    write_mnist(path, 50, 10)
    path.write_bytes(path.read_bytes()[:3000])
    with pytest.raises(DatasetError, match=r"MNIST file .*mnist\.npz is corrupt or truncated"):
        mnist.load_data()


def test_mnist_file_without_expected_arrays(tmp_path):
    np.savez(cache(tmp_path) / "mnist.npz", x_train=np.zeros((2, 28, 28), np.uint8))
    with pytest.raises(DatasetError, match=r"has no array 'y_train'; it has x_train"):
        mnist.load_data()


# ---- pickles: the restricted unpickler ------------------------------------------------------------

class Exploit:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_safe_unpickle_refuses_os_system_and_does_not_run_it(tmp_path):
    marker = tmp_path / "pwned"
    payload = pickle.dumps({b"data": Exploit(marker), b"labels": [0]}, protocol=2)
    with pytest.raises(DatasetError, match=r"refusing to unpickle (posix|nt|os)\.system"):
        _files.safe_unpickle(io.BytesIO(payload), "test pickle")
    assert not marker.exists()


def test_safe_unpickle_round_trips_arrays_every_protocol():
    value = {b"data": np.arange(12, dtype=np.uint8).reshape(3, 4), b"labels": [1, 2, 3],
             b"f": np.linspace(0, 1, 5), b"s": np.float32(2.5)}
    for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
        got = _files.safe_unpickle(io.BytesIO(pickle.dumps(value, protocol=protocol)), "p")
        np.testing.assert_array_equal(got[b"data"], value[b"data"])
        np.testing.assert_array_equal(got[b"f"], value[b"f"])
        assert got[b"labels"] == [1, 2, 3] and got[b"s"] == np.float32(2.5)


def test_safe_unpickle_truncated_is_a_clear_error():
    payload = pickle.dumps({b"data": np.zeros(100)}, protocol=2)
    with pytest.raises(DatasetError, match=r"p is corrupt or truncated"):
        _files.safe_unpickle(io.BytesIO(payload[:60]), "p")


# ---- cifar10 ------------------------------------------------------------------------------------

def write_batch(path, n, seed, labels_key=b"labels"):
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
    labels = [int(v) for v in rng.integers(0, 10, n)]
    with open(path, "wb") as f:  # Keras' files: protocol 2, byte-string keys
        pickle.dump({b"batch_label": b"x", labels_key: labels, b"data": data, b"filenames": [b"a"] * n}, f,
                    protocol=2)
    return data, labels


def write_cifar(root, per_batch, batches=5, n_test=7):
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    train = [write_batch(folder / f"data_batch_{i}", per_batch, i) for i in range(1, batches + 1)]
    test = write_batch(folder / "test_batch", n_test, 99)
    return folder, train, test


@pytest.fixture
def small_batches(monkeypatch):
    monkeypatch.setattr(cifar10, "SAMPLES_PER_BATCH", 4)


def check_cifar(got, train, test, num_batches):
    (x_train, y_train), (x_test, y_test) = got
    n = sum(len(d) for d, _ in train[:num_batches])
    assert x_train.shape == (n, 3, 32, 32) and x_train.dtype == np.uint8
    assert y_train.shape == (n, 1) and y_test.shape == (len(test[0]), 1)
    assert x_test.shape == (len(test[0]), 3, 32, 32)
    want_x = np.concatenate([d for d, _ in train[:num_batches]]).reshape(n, 3, 32, 32)
    np.testing.assert_array_equal(x_train, want_x)  # channels first, not transposed
    assert x_train[0, 1, 0, 0] == train[0][0][0, 1024]  # green plane starts at column 1024
    np.testing.assert_array_equal(y_train[:, 0], [v for _, lab in train[:num_batches] for v in lab])
    np.testing.assert_array_equal(y_test[:, 0], test[1])
    np.testing.assert_array_equal(x_test, test[0].reshape(-1, 3, 32, 32))


@pytest.mark.parametrize("batches", [1, 2, 5])
def test_cifar10_load_data_takes_the_first_batches(tmp_path, small_batches, batches):
    _, train, test = write_cifar(cache(tmp_path), 4)
    check_cifar(cifar10.load_data(4 * batches), train, test, batches)


def test_cifar10_full_size_batch(tmp_path):
    _, train, test = write_cifar(cache(tmp_path), 10000, batches=1, n_test=10000)
    got = cifar10.load_data(10000)
    assert got[0][0].shape == (10000, 3, 32, 32) and got[1][0].shape == (10000, 3, 32, 32)
    check_cifar(got, train, test, 1)


@pytest.mark.parametrize("bad", [0, 5000, 15000, 60000, -10000, 10000.0, True, "10000", None])
def test_cifar10_num_samples_must_be_whole_batches(bad):
    with pytest.raises(ConfigError, match=r"num_samples=.* valid: 10000, 20000, 30000, 40000, 50000"):
        cifar10.load_data(bad)


def test_cifar10_wrong_batch_size_is_named(tmp_path):
    write_cifar(cache(tmp_path), 3, batches=1)
    with pytest.raises(DatasetError, match=r"data_batch_1 holds 3 images; .* holds 10000"):
        cifar10.load_data(10000)


def test_cifar10_malicious_batch_is_refused(tmp_path, small_batches):
    folder, _, _ = write_cifar(cache(tmp_path), 4, batches=1)
    marker = tmp_path / "pwned"
    with open(folder / "data_batch_1", "wb") as f:
        pickle.dump({b"data": Exploit(marker), b"labels": [0]}, f, protocol=2)
    with pytest.raises(DatasetError, match=r"data_batch_1: refusing to unpickle .*system"):
        cifar10.load_data(4)
    assert not marker.exists()


def test_load_batch_fine_labels_and_missing_key(tmp_path):
    _, labels = write_batch(tmp_path / "train", 3, 0, labels_key=b"fine_labels")
    got, got_labels = cifar.load_batch(tmp_path / "train", label_key="fine_labels")
    assert got.shape == (3, 3, 32, 32) and got_labels == labels
    with pytest.raises(DatasetError, match=r"has no 'labels'"):
        cifar.load_batch(tmp_path / "train")


def make_tarball(path, folder, extra=()):
    with tarfile.open(path, "w:gz") as tar:
        tar.add(folder, arcname="cifar-10-batches-py")
        for info, data in extra:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)


def test_cifar10_tarball_in_data_dir_is_unpacked_into_keras_cache(tmp_path, monkeypatch, small_batches):
    src, train, test = write_cifar(tmp_path / "src", 4, batches=2)
    mine = tmp_path / "mine"
    mine.mkdir()
    make_tarball(mine / "cifar-10-python.tar.gz", src)
    monkeypatch.setenv("FLEXRT_DATA_DIR", str(mine))
    check_cifar(cifar10.load_data(8), train, test, 2)
    assert (cache(tmp_path) / "cifar-10-batches-py" / "data_batch_2").is_file()
    assert sorted(p.name for p in cache(tmp_path).iterdir()) == ["cifar-10-batches-py"]


def test_cifar10_download_unpacks_the_tarball(tmp_path, monkeypatch, small_batches):
    src, train, test = write_cifar(tmp_path / "src", 4, batches=1)
    tarball = tmp_path / "cifar-10-python.tar.gz"
    make_tarball(tarball, src)
    monkeypatch.setattr(cifar10, "ORIGIN", tarball.as_uri())
    monkeypatch.setattr(cifar10, "FILE_HASH", md5(tarball))
    check_cifar(cifar10.load_data(4), train, test, 1)
    assert sorted(p.name for p in cache(tmp_path).iterdir()) == ["cifar-10-batches-py", "cifar-10-batches-py.tar.gz"]


def test_cifar10_missing_names_folder_tarballs_and_url(tmp_path, monkeypatch):
    monkeypatch.setattr(_files, "fetch", lambda *a: (_ for _ in ()).throw(urllib.error.URLError("offline")))
    with pytest.raises(DatasetError) as e:
        cifar10.load_data(10000)
    msg = str(e.value)
    for name in ("cifar-10-batches-py (Keras' cache)", "cifar-10-batches-py.tar.gz", "cifar-10-python.tar.gz",
                 "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz", "offline"):
        assert name in msg


def tar_entry(name, kind=tarfile.REGTYPE, data=b"x", linkname=""):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    return info, (data if kind == tarfile.REGTYPE else None)


@pytest.mark.parametrize("entry, why", [
    (("cifar-10-batches-py/../../escaped", tarfile.REGTYPE), "outside the folder"),
    (("/tmp/flexrt-absolute-escape", tarfile.REGTYPE), "outside the folder"),
    (("cifar-10-batches-py/link", tarfile.SYMTYPE, b"", "/etc/passwd"), "link or a special file"),
])
def test_unsafe_tarball_is_refused(tmp_path, small_batches, entry, why):
    src, _, _ = write_cifar(tmp_path / "src", 4, batches=1)
    tarball = cache(tmp_path) / "cifar-10-batches-py.tar.gz"
    make_tarball(tarball, src, [tar_entry(*entry)])
    with pytest.raises(DatasetError, match=why):
        cifar10.load_data(4)
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "keras" / "escaped").exists()
    assert not os.path.exists("/tmp/flexrt-absolute-escape")
    assert sorted(p.name for p in cache(tmp_path).iterdir()) == ["cifar-10-batches-py.tar.gz"]


def test_truncated_tarball_is_a_clear_error(tmp_path, small_batches):
    src, _, _ = write_cifar(tmp_path / "src", 4, batches=1)
    tarball = cache(tmp_path) / "cifar-10-batches-py.tar.gz"
    make_tarball(tarball, src)
    tarball.write_bytes(tarball.read_bytes()[:500])
    with pytest.raises(DatasetError, match=r"cifar-10-batches-py\.tar\.gz is corrupt or truncated"):
        cifar10.load_data(4)


# ---- reuters ------------------------------------------------------------------------------------

SEQS = [[5, 1, 7], [2, 9], [1, 1, 1, 1, 1, 1], [8], [3, 4, 5, 6], [10, 2, 2], [6, 6], [4, 9, 12, 1, 3]]
TOPICS = [0, 3, 1, 4, 2, 0, 1, 3]


def write_reuters(path, seqs=SEQS, topics=TOPICS):
    x = np.empty(len(seqs), dtype=object)
    for i, s in enumerate(seqs):
        x[i] = list(s)
    np.savez(path, x=x, y=np.array(topics, dtype=np.int64))


def shuffled(seed=113):
    idx = np.arange(len(SEQS))
    np.random.RandomState(seed).shuffle(idx)
    return [SEQS[i] for i in idx], [TOPICS[i] for i in idx]


def test_reuters_defaults_shift_words_and_split(tmp_path):
    write_reuters(cache(tmp_path) / "reuters.npz")
    (x_train, y_train), (x_test, y_test) = reuters.load_data()
    seqs, topics = shuffled()
    want = [[1] + [w + 3 for w in s] for s in seqs]
    top = max(max(s) for s in want)  # Keras 2: the largest index itself becomes out of vocabulary
    want = [[w if w < top else 2 for w in s] for s in want]
    assert x_train.dtype == object and x_train.shape == (6,) and x_test.shape == (2,)
    assert list(x_train) + list(x_test) == want
    assert list(y_train) + list(y_test) == topics


def test_reuters_num_words_skip_top_maxlen_and_oov(tmp_path):
    write_reuters(cache(tmp_path) / "reuters.npz")
    (x_train, y_train), (x_test, y_test) = reuters.load_data(num_words=9, skip_top=2, maxlen=5, test_split=0.5,
                                                             seed=7, start_char=None, oov_char=None, index_from=0)
    seqs, topics = shuffled(7)
    kept = [(s, t) for s, t in zip(seqs, topics) if len(s) < 5]
    want = [[w for w in s if 2 <= w < 9] for s, _ in kept]
    assert list(x_train) + list(x_test) == want and len(x_train) == len(kept) // 2
    assert list(y_train) + list(y_test) == [t for _, t in kept]


def test_reuters_equal_lengths_stay_one_dimensional(tmp_path):
    write_reuters(cache(tmp_path) / "reuters.npz", [[1, 2], [3, 4], [5, 6]], [0, 1, 0])
    (x_train, _), _ = reuters.load_data(test_split=0)
    assert x_train.shape == (3,) and all(isinstance(s, list) and len(s) == 3 for s in x_train)


def test_reuters_nb_words_is_num_words_with_a_warning_and_unknown_kwargs_fail(tmp_path):
    write_reuters(cache(tmp_path) / "reuters.npz")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = reuters.load_data(nb_words=6)
    assert any("num_words" in str(w.message) for w in caught)
    new = reuters.load_data(num_words=6)
    assert [list(a) for a in old[0][0]] == [list(a) for a in new[0][0]]
    with pytest.raises(TypeError, match="num_wrods"):
        reuters.load_data(num_wrods=6)


def test_reuters_malicious_object_array_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    buf = io.BytesIO()  # what np.save writes for an object array: the header, then a pickle
    np.lib.format.write_array_header_1_0(buf, {"descr": "|O", "fortran_order": False, "shape": (1,)})
    pickle.dump(Exploit(marker), buf, protocol=3)
    with zipfile.ZipFile(cache(tmp_path) / "reuters.npz", "w") as z:
        z.writestr("x.npy", buf.getvalue())
        z.writestr("y.npy", b"")
    with pytest.raises(DatasetError, match=r"reuters\.npz \(array 'x'\): refusing to unpickle .*system"):
        reuters.load_data()
    assert not marker.exists()


def test_reuters_word_index(tmp_path):
    (cache(tmp_path) / "reuters_word_index.json").write_text('{"the": 1, "of": 2}')
    assert reuters.get_word_index() == {"the": 1, "of": 2}
    (cache(tmp_path) / "reuters_word_index.json").write_text("[1, 2]")
    with pytest.raises(DatasetError, match="not an object"):
        reuters.get_word_index()


def test_flexflow_style_imports():
    import flexrt.keras
    from flexrt.keras.datasets import cifar10 as c
    from flexrt.keras.datasets import mnist as m
    assert flexrt.keras.datasets.mnist is m and callable(c.load_data)


# ---- under the flexrt command ----------------------------------------------------------------------

SCRIPT = """\
from flexrt.keras.datasets import {name}
from flexrt.keras.layers import Dense, Flatten, Input
from flexrt.keras.models import Model
import flexrt.keras.optimizers

(x_train, y_train), _ = {name}.load_data()
inp = Input(shape=x_train.shape[1:], dtype="float32")
out = Dense(10, activation="softmax")(Flatten()(inp) if len(x_train.shape) > 2 else inp)
model = Model(inp, out)
model.compile(optimizer=flexrt.keras.optimizers.SGD(0.01), loss="sparse_categorical_crossentropy")
model.fit(x_train, y_train, epochs=1)
"""


@pytest.mark.parametrize("name, shape", [("mnist", "[8, 28, 28]"), ("cifar10", "[8, 3, 32, 32]")])
def test_the_flexrt_command_builds_a_script_on_synthetic_data_when_its_data_set_is_absent(
        tmp_path, monkeypatch, capsys, name, shape):
    """A Keras script loading its data set before compile: without the files, ``flexrt show`` builds
    the model on synthetic data of the real shapes (never downloading: the data is never read), says
    so once; outside the command the loader still refuses, naming the file."""
    from flexrt.cli import main
    monkeypatch.setenv("FLEXRT_CACHE_DIR", str(tmp_path / "cache"))

    def no_network(url, out, desc):
        raise AssertionError(f"the flexrt command tried to download {url}")

    monkeypatch.setattr(_files, "fetch", no_network)
    script = tmp_path / f"{name}_script.py"
    script.write_text(SCRIPT.format(name=name))
    assert main(["show", str(script), "-b", "8"]) == 0
    out, err = capsys.readouterr()
    assert shape in out and "is not on this host; the flexrt command builds the model on synthetic data" in err
    assert main(["show", str(script), "-b", "8"]) == 0     # said once
    assert "synthetic" not in capsys.readouterr().err
    monkeypatch.setattr(_files, "fetch", lambda url, out, desc: (_ for _ in ()).throw(
        urllib.error.URLError("no network")))
    with pytest.raises(DatasetError, match="is missing"):
        getattr(flexrt_datasets(), name).load_data()


def flexrt_datasets():
    import flexrt.keras.datasets as d
    return d
