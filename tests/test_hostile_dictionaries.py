"""Hostile dictionary files are refused as hostile model files are (issue 51, item 7).

Every failure is one :class:`DictionaryError` line (a ``ValueError``) of at most 300 characters, raised before
anything large is allocated, and leaves nothing behind: a failed conversion removes its output folder, a refused
upload its unpacked files, and nothing is ever written outside the upload's own folder. A set whose parts disagree
(two dictionaries on one hook, a hook that is not an activation, an index that does not fit its dictionary, its
corpus or the model's vocabulary) is refused whole at upload, so that the Features and Steering pages never meet it.
"""

from __future__ import annotations

import io
import os
import struct
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import small_model
from test_dictionary_jobs import _zip as zipped
from viz_model.features import DictionaryError, SparseDictionary, load_dictionary, save_dictionary
from viz_model.features import gemma_scope
from viz_model.features.gemma_scope import convert_gemma_scope
from viz_model.features.index import build_index, load_index, save_corpus, save_index
from viz_model.features.upload import unpack_dictionaries

MAX_LEN = 300
D_MODEL, D_SAE, D_VOCAB = 32, 16, 320  # conftest's small model
HOOK = "blocks.1.hook_resid_post"


def refused(call, *words: str, seconds: float = 10.0) -> str:
    """``call()`` raises DictionaryError (a ValueError): one line of at most 300 characters holding every word, within
    ``seconds``; returns the message."""
    start = time.perf_counter()
    with pytest.raises(DictionaryError) as info:
        call()
    elapsed = time.perf_counter() - start
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    assert message.strip() and "\n" not in message and len(message) <= MAX_LEN, repr(message)
    assert "Traceback" not in message
    for word in words:
        assert word.lower() in message.lower(), f"{word!r} not in {message!r}"
    assert elapsed < seconds, (elapsed, message)
    return message


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture
def model():
    return small_model()


@pytest.fixture
def spool(tmp_path, monkeypatch) -> Path:
    """A private temporary folder for the test: the only place anything may be written."""
    root = tmp_path / "spool"
    root.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(root))
    monkeypatch.delenv("VIZ_MAX_MODEL_MB", raising=False)
    return root


# ---- building blocks -------------------------------------------------------------------------------------------

def sae(hook: str = HOOK, d_in: int = D_MODEL, d_sae: int = D_SAE, seed: int = 0) -> SparseDictionary:
    d = SparseDictionary(d_in, d_sae, hook, "topk", 4)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in d.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    return d


def index_tensors(d_sae: int = D_SAE, n_windows: int = 6, window: int = 32, seed: int = 0) -> dict:
    acts = torch.rand(n_windows, window, d_sae, generator=torch.Generator().manual_seed(seed))
    return build_index(acts, n_top=4, context=24, lead=19)


def corpus(n_windows: int = 6, window: int = 32, top: int = D_VOCAB) -> torch.Tensor:
    return torch.randint(0, top, (n_windows, window), generator=torch.Generator().manual_seed(1))


def dictionary_files(root: Path, hook: str = HOOK, index: dict | None = None, **kw) -> dict[str, bytes]:
    """``{archive path: bytes}`` of one dictionary folder named after its hook (with ``index`` when given)."""
    folder = save_dictionary(sae(hook, **kw), root / hook)
    if index is not None:
        save_index(index, folder)
    return {f"{hook}/{p.name}": p.read_bytes() for p in folder.iterdir()}


def corpus_bytes(root: Path, tokens: torch.Tensor) -> bytes:
    root.mkdir(parents=True, exist_ok=True)
    return save_corpus(tokens, root).read_bytes()


def upload(data: bytes, spool: Path, model) -> list[Path]:
    return unpack_dictionaries(data, spool / "set", model, "upload.zip")


def assert_refused_upload(data: bytes, spool: Path, model, *words: str) -> str:
    message = refused(lambda: upload(data, spool, model), *words)
    assert tree(spool) == [], tree(spool)  # nothing left, and nothing written outside the upload's folder
    return message


# ---- cfg.json ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, words", [
    ("[" * 200_000 + "]" * 200_000, ("nested too deeply",)),
    ('{"metadata": ' + "{\"a\": " * 100_000 + "1" + "}" * 100_001, ("nested too deeply",)),
    ('{"d_in": ' + "7" * 5000 + "}", ("too many digits",)),
    (b"\xff\xfe{}", ("not UTF-8",)),
    ("{" + " " * (2 << 20) + "}", ("above the 1 MB",)),
])
def test_a_cfg_json_that_is_not_a_plain_small_json_object(tmp_path, spool, model, text, words):
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "cfg.json").write_bytes(text if isinstance(text, bytes) else text.encode())
    refused(lambda: load_dictionary(folder), "cfg.json", *words)
    archive = zipped({"d/cfg.json": (folder / "cfg.json").read_bytes(), "d/sae_weights.safetensors": b"x"})
    assert_refused_upload(archive, spool, model, *words)


# ---- Gemma Scope's params.npz -------------------------------------------------------------------------------------

def gemma_arrays(d_in: int = 8, d_sae: int = 24, seed: int = 0) -> dict[str, np.ndarray]:
    g = np.random.default_rng(seed)
    return {"W_enc": g.normal(size=(d_in, d_sae)).astype(np.float32),
            "W_dec": g.normal(size=(d_sae, d_in)).astype(np.float32),
            "b_enc": g.normal(size=d_sae).astype(np.float32), "b_dec": g.normal(size=d_in).astype(np.float32),
            "threshold": g.uniform(size=d_sae).astype(np.float32)}


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def npy_header(shape: tuple[int, ...], descr: str = "<f4") -> bytes:
    """A .npy header alone (no data) that describes an array of ``shape``."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": descr, "fortran_order": False, "shape": shape})
    return buffer.getvalue()


def convert_refused(path: Path, tmp_path: Path, *words: str, hook="blocks.0.hook_resid_post") -> str:
    out = tmp_path / "converted"
    message = refused(lambda: convert_gemma_scope(path, out, hook), *words)
    assert not out.exists()  # a failed conversion leaves no output folder
    return message


def test_a_valid_npz_still_converts_and_its_folder_loads(tmp_path):
    arrays = gemma_arrays()
    np.savez_compressed(tmp_path / "params.npz", **arrays)
    d = convert_gemma_scope(tmp_path / "params.npz", tmp_path / "out", "blocks.0.hook_resid_post")
    assert torch.equal(d.W_enc, torch.from_numpy(arrays["W_enc"]))
    assert torch.equal(load_dictionary(tmp_path / "out").W_dec, torch.from_numpy(arrays["W_dec"]))
    assert sorted(os.listdir(tmp_path / "out")) == ["cfg.json", "sae_weights.safetensors"]


@pytest.mark.parametrize("where", ["deflate stream", "stored data"])
def test_a_corrupt_member_is_refused_and_leaves_no_folder(tmp_path, where):
    arrays = gemma_arrays(64, 256)
    (np.savez_compressed if where == "deflate stream" else np.savez)(tmp_path / "p.npz", **arrays)
    data = bytearray((tmp_path / "p.npz").read_bytes())
    with zipfile.ZipFile(tmp_path / "p.npz") as z:
        info = z.getinfo("W_enc.npy")
    local = info.header_offset + 30 + len(info.filename) + len(info.extra)  # the member's data start
    middle = local + info.compress_size // 2  # far past the .npy header: the header still reads
    data[middle:middle + 64] = bytes(b ^ 0x5A for b in data[middle:middle + 64])
    (tmp_path / "p.npz").write_bytes(bytes(data))
    convert_refused(tmp_path / "p.npz", tmp_path, "p.npz")


def test_names_that_differ_only_in_case_are_refused(tmp_path):
    arrays = gemma_arrays()
    members = {f"{k}.npy": npy(v) for k, v in arrays.items()}
    members["w_enc.npy"] = npy(arrays["W_enc"] * 100)  # a second W_enc: both would be read, the last one kept
    (tmp_path / "case.npz").write_bytes(zipped(members))
    convert_refused(tmp_path / "case.npz", tmp_path, "differ only in case")


def _patch_central(data: bytes, name: str, compress: int | None = None, size: int | None = None) -> bytes:
    """The archive with member ``name``'s sizes in the central directory (what zipfile reads) replaced."""
    out = bytearray(data)
    at = out.find(b"PK\x01\x02" + bytes(0))
    while at >= 0:
        n, m, k = struct.unpack("<HHH", out[at + 28:at + 34])
        if out[at + 46:at + 46 + n].decode() == name:
            if compress is not None:
                out[at + 20:at + 24] = struct.pack("<I", compress)
            if size is not None:
                out[at + 24:at + 28] = struct.pack("<I", size)
        at = out.find(b"PK\x01\x02", at + 46 + n + m + k)
    return bytes(out)


def test_declared_sizes_are_checked_against_the_headers_and_the_file(tmp_path):
    arrays = gemma_arrays()
    base = zipped({f"{k}.npy": npy(v) for k, v in arrays.items()})
    real = len(npy(arrays["W_enc"]))
    (tmp_path / "more.npz").write_bytes(_patch_central(base, "W_enc.npy", size=real + 4096))
    convert_refused(tmp_path / "more.npz", tmp_path, "declares", "header")
    (tmp_path / "forged.npz").write_bytes(_patch_central(base, "W_enc.npy", compress=2**31))
    convert_refused(tmp_path / "forged.npz", tmp_path, "more compressed bytes than the file")
    # headers that claim 32 GiB of arrays in members of a few bytes each
    n = 2**30
    claims = {"W_enc": (8, n), "W_dec": (n, 8), "b_enc": (n,), "b_dec": (8,), "threshold": (n,)}
    (tmp_path / "claims.npz").write_bytes(zipped({f"{k}.npy": npy_header(s) + b"\x00" * 64 for k, s in claims.items()}))
    convert_refused(tmp_path / "claims.npz", tmp_path, "declares", "header describes")


def test_a_small_archive_declaring_gigabytes_is_refused_before_any_allocation(tmp_path, monkeypatch):
    """A deflated member of zeros (8 MiB that pack into a few KB) whose header agrees with its declared size: the
    ratio refuses it; with a shape whose arrays would fill gigabytes, the peak-memory cap refuses it; neither
    builds the dictionary."""
    monkeypatch.setattr(gemma_scope, "SparseDictionary", lambda *a, **k: pytest.fail("allocated"))
    d_in, d_sae = 8, 262_144
    members = {f"{k}.npy": npy(np.zeros(shape, np.float32)) for k, shape in  # 8 MiB of zeros in each matrix
               {"W_enc": (d_in, d_sae), "W_dec": (d_sae, d_in), "b_enc": (d_sae,), "b_dec": (d_in,),
                "threshold": (d_sae,)}.items()}
    (tmp_path / "bomb.npz").write_bytes(zipped(members, zipfile.ZIP_DEFLATED))
    assert (tmp_path / "bomb.npz").stat().st_size < 200_000
    convert_refused(tmp_path / "bomb.npz", tmp_path, "zip bomb")
    # every array consistent and stored, 1.2 GB of weights: its conversion's peak (2.4 GB) is above a 1 GB cap
    monkeypatch.setenv("VIZ_MAX_MODEL_MB", "1024")
    d_in, d_sae = 2304, 65_536
    shapes = {"W_enc": (d_in, d_sae), "W_dec": (d_sae, d_in), "b_enc": (d_sae,), "b_dec": (d_in,),
              "threshold": (d_sae,)}
    members = {f"{name}.npy": npy_header(shape) for name, shape in shapes.items()}  # headers only
    data = zipped(members)
    for name, shape in shapes.items():  # each member declares what its header describes (stored: as many packed)
        size = len(members[f"{name}.npy"]) + 4 * int(np.prod(shape))
        data = _patch_central(data, f"{name}.npy", compress=size, size=size)
    (tmp_path / "gigabytes.npz").write_bytes(data)
    assert (tmp_path / "gigabytes.npz").stat().st_size < 10_000
    convert_refused(tmp_path / "gigabytes.npz", tmp_path)


def test_the_peak_not_only_the_final_dictionary_is_held_to_the_cap(tmp_path, monkeypatch):
    """4 N bytes of float32 weights fit a 1 MB cap, the 8 N of the conversion's peak do not."""
    d_in, d_sae = 64, 1100
    n = 2 * d_in * d_sae + 2 * d_sae + d_in
    assert 4 * n < 2**20 < gemma_scope.conversion_bytes(
        {"W_enc": (d_in, d_sae), "W_dec": (d_sae, d_in), "b_enc": (d_sae,), "b_dec": (d_in,), "threshold": (d_sae,)},
        dict.fromkeys(["W_enc", "W_dec", "b_enc", "b_dec", "threshold"], 4))
    np.savez(tmp_path / "p.npz", **gemma_arrays(d_in, d_sae))
    monkeypatch.setenv("VIZ_MAX_MODEL_MB", "1")
    convert_refused(tmp_path / "p.npz", tmp_path, "converting it needs", "VIZ_MAX_MODEL_MB")


@pytest.mark.parametrize("case", ["nan", "negative threshold", "object", "float64", "missing", "not a zip"])
def test_other_bad_arrays_leave_no_folder(tmp_path, case):
    arrays = gemma_arrays()
    if case == "nan":
        arrays["b_enc"][3] = np.nan
    elif case == "negative threshold":
        arrays["threshold"][0] = -1.0
    elif case == "float64":
        arrays["W_dec"] = arrays["W_dec"].astype(np.float64)
    elif case == "missing":
        del arrays["b_dec"]
    path = tmp_path / "p.npz"
    if case == "object":
        np.savez(path, **{**arrays, "W_dec": np.array([object()] * 3)})
    elif case == "not a zip":
        path.write_bytes(b"PK\x03\x04" + b"\x00" * 40)
    else:
        np.savez(path, **arrays)
    convert_refused(path, tmp_path, {"nan": "NaN", "negative threshold": "negative", "object": "dtype",
                                     "float64": "dtype", "missing": "expected arrays", "not a zip": "readable"}[case])


def test_an_existing_output_folder_is_never_removed(tmp_path):
    np.savez(tmp_path / "p.npz", **{**gemma_arrays(), "b_enc": np.full(24, np.nan, np.float32)})
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    refused(lambda: convert_gemma_scope(tmp_path / "p.npz", out, "h"), "not empty")
    assert (out / "notes.txt").read_text() == "keep me"
    empty = tmp_path / "empty"
    empty.mkdir()
    refused(lambda: convert_gemma_scope(tmp_path / "p.npz", empty, "h"), "NaN")
    assert empty.is_dir() and list(empty.iterdir()) == []  # the caller's folder stays, without our files


# ---- uploads: sets whose parts disagree ---------------------------------------------------------------------------

def test_a_consistent_set_with_an_index_is_accepted(tmp_path, spool, model):
    files = {**dictionary_files(tmp_path, index=index_tensors()), "corpus.safetensors": corpus_bytes(tmp_path / "c", corpus())}
    folders = upload(zipped(files), spool, model)
    assert [f.name for f in folders] == [HOOK]
    index = load_index(folders[0], D_VOCAB)
    assert index.d_sae == D_SAE and all(t < D_VOCAB for c in index.contexts(3) for t in c.tokens)
    assert all(str(p).startswith(str(spool / "set")) for p in spool.rglob("*"))


def test_two_dictionaries_on_one_hook_are_refused(tmp_path, spool, model):
    first = dictionary_files(tmp_path / "a")
    second = {k.replace(HOOK, "again"): v for k, v in dictionary_files(tmp_path / "b", seed=1).items()}
    assert_refused_upload(zipped({**first, **second}), spool, model, "both read", HOOK)


@pytest.mark.parametrize("hook, d_in", [("blocks.0.attn.hook_pattern", 1), ("blocks.0.attn.hook_attn_scores", 1),
                                        ("blocks.0.attn.hook_q", 8), ("blocks.0.attn.hook_pattern", 3)])
def test_a_hook_that_is_not_an_activation_is_refused(tmp_path, spool, model, hook, d_in):
    """A one-token forward gives hook_pattern a last width of 1 (and hook_q d_head): the widths alone would pass."""
    message = assert_refused_upload(zipped(dictionary_files(tmp_path, hook=hook, d_in=d_in)), spool, model,
                                    "not an activation")
    assert hook in message


def _set_with(tmp_path, index=None, tokens=None, with_corpus=True) -> bytes:
    files = dictionary_files(tmp_path, index=index_tensors() if index is None else index)
    if with_corpus:
        files["corpus.safetensors"] = corpus_bytes(tmp_path / "c", corpus() if tokens is None else tokens)
    return zipped(files)


def _index(**changes) -> dict:
    ix = index_tensors()
    for key, value in changes.items():
        if value is None:
            del ix[key]
        else:
            ix[key] = value(ix[key]) if callable(value) else value
    return ix


def _shift_windows(w: torch.Tensor) -> torch.Tensor:
    return torch.where(w >= 0, w + 100, w)


INDEX_CASES = {
    "d_sae": (dict(index=index_tensors(d_sae=8)), ("8 features", "d_sae 16")),
    "windows beyond the corpus": (dict(index=_index(window=_shift_windows)), ("outside the corpus",)),
    "short corpus": (dict(tokens=corpus(n_windows=2)), ("outside the corpus",)),
    "ids beyond the vocabulary": (dict(tokens=corpus(top=D_VOCAB + 50) + 0), ("vocabulary",)),
    "negative ids": (dict(tokens=-corpus() - 1), ("vocabulary",)),
    "peaks": (dict(index=_index(peak=lambda p: p + 40)), ("peaks outside",)),
    "starts": (dict(index=_index(start=lambda s: s + 20)), ("outside their",)),
    "no corpus": (dict(with_corpus=False), ("no corpus.safetensors",)),
    "missing tensor": (dict(index=_index(hist=None)), ("lacks hist",)),
    "dtype": (dict(index=_index(value=lambda v: v.float())), ("dtype",)),
    "shapes": (dict(index=_index(freq=lambda f: f[:-1])), ("inconsistent shapes", "freq")),
    "nan": (dict(index=_index(acts=lambda a: a.fill_(float("nan")))), ("NaN",)),
    "narrow windows": (dict(tokens=corpus(window=10)), ("cannot hold",)),
}


@pytest.mark.parametrize("case", list(INDEX_CASES))
def test_an_index_that_disagrees_is_refused_at_load_and_at_upload(tmp_path, spool, model, case):
    kw, words = INDEX_CASES[case]
    data = _set_with(tmp_path, **kw)
    assert_refused_upload(data, spool, model, *words)
    # and load_index, which the pages call, refuses the same folder in one line
    root = tmp_path / "unpacked"
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        z.extractall(root)
    refused(lambda: load_index(root / HOOK, D_VOCAB), *words)


def test_a_corrupt_index_file_is_one_plain_line(tmp_path, spool, model):
    files = dictionary_files(tmp_path, index=index_tensors())
    files[f"{HOOK}/top_contexts.safetensors"] = b"\x08\x00\x00\x00\x00\x00\x00\x00{\"a\":1}"
    files["corpus.safetensors"] = corpus_bytes(tmp_path / "c", corpus())
    message = assert_refused_upload(zipped(files), spool, model, "cannot be read")
    assert "SafetensorError" not in message.split("(")[0]


def test_a_refused_upload_into_an_existing_folder_keeps_the_folder_and_removes_its_files(tmp_path, spool, model):
    dest = spool / "mine"
    dest.mkdir()
    data = zipped(dictionary_files(tmp_path, hook="blocks.0.attn.hook_pattern", d_in=1))
    refused(lambda: unpack_dictionaries(data, dest, model, "upload.zip"), "not an activation")
    assert dest.is_dir() and tree(dest) == []


def test_the_pages_reader_skips_an_index_that_disagrees(tmp_path):
    """get_index (the pages' cached reader) gives None for an index the upload would refuse: the Features and
    Steering pages then show the dictionary without contexts instead of raising IndexError."""
    from viz_ui.app.features import get_index
    folder = save_dictionary(sae(), tmp_path / HOOK)
    save_index(index_tensors(d_sae=8), folder)
    save_corpus(corpus(), tmp_path)
    assert get_index(str(folder), D_VOCAB) is None
    get_index.clear()
    save_index(index_tensors(), folder)
    save_corpus(corpus(top=D_VOCAB + 50), tmp_path)
    assert get_index(str(folder), D_VOCAB) is None
    get_index.clear()
    save_corpus(corpus(), tmp_path)
    assert get_index(str(folder), D_VOCAB).d_sae == D_SAE
    get_index.clear()


@pytest.mark.parametrize("hook", ["", "h" * 201, None, ["blocks.0.hook_resid_post"]])
def test_a_hook_name_that_is_not_a_short_string_is_refused(tmp_path, hook):
    np.savez(tmp_path / "p.npz", **gemma_arrays())
    convert_refused(tmp_path / "p.npz", tmp_path, "hook name", hook=hook)
