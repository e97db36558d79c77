"""Dictionaries trained in the page's background job (viz_model.features.job) and uploaded as a .zip
(viz_model.features.upload), on a small random model."""

import io
import json
import re
import shutil
import time
import zipfile

import pytest
import torch
from safetensors.torch import save_file

from conftest import small_model
from viz_model.features import load_dictionary, save_dictionary
from viz_model.features.dictionary import SparseDictionary
from viz_model.features.index import load_index
from viz_model.features.saelens import DictionaryError
from viz_model.features.job import DictionaryJob, DictSettings
from viz_model.features.upload import new_set_folder, unpack_dictionaries
from viz_model.training.live import Registry, TrainingRefused

SMALL = DictSettings(layers=(0, 1), d_sae=64, k=4, steps=30, batch_size=256)


@pytest.fixture
def folder():
    path = new_set_folder("test")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def run(job: DictionaryJob, timeout: float = 120) -> DictionaryJob:
    job.start()
    assert job.wait(timeout)
    return job


def test_a_job_trains_one_dictionary_per_layer_in_saelens_layout(corpus, tokenizer, folder):
    model = small_model()
    seen = []
    job = DictionaryJob(corpus, SMALL, "stories", model=model, tokenizer=tokenizer, folder=folder).start()
    while job.running:
        seen.append(job.progress().fraction)
        time.sleep(0.02)
    p = job.progress()
    assert p.status == "done", p.error
    assert p.fraction == 1.0 and seen == sorted(seen)  # the bar only moves forward
    assert p.written == ["blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]
    x = torch.randn(5, model.cfg.d_model)
    for path, hook in zip(job.folders(), p.written):
        cfg = json.loads((path / "cfg.json").read_text())
        assert (cfg["architecture"], cfg["hook_name"], cfg["d_in"], cfg["d_sae"], cfg["k"]) == ("topk", hook, 32, 64, 4)
        d = load_dictionary(path)
        assert ((d.encode(x) > 0).sum(-1) <= 4).all()
        assert load_index(path).d_sae == 64  # the top-context index and its corpus are written too
    # the model the job read is left without hooks and unchanged in its outputs
    assert not any(h.active for h in model.hook_dict.values())


def test_cancel_and_time_limit_keep_what_is_trained(corpus, tokenizer, folder):
    model = small_model()
    long = DictSettings(layers=(0, 1), d_sae=64, k=4, steps=5000, batch_size=256)
    job = DictionaryJob(corpus, long, "stories", model=model, tokenizer=tokenizer, folder=folder).start()
    while job.progress().status != "training" and job.running:
        time.sleep(0.01)
    time.sleep(0.3)
    job.cancel()
    assert job.wait(30)
    p = job.progress()
    assert p.status == "cancelled" and p.written == ["blocks.0.hook_resid_post"]  # the first layer, cut short
    load_dictionary(job.folders()[0])
    timed = run(DictionaryJob(corpus, long, "stories", model=model, tokenizer=tokenizer, folder=folder / "t",
                              max_seconds=0.5))
    assert timed.progress().status == "timed out"


@pytest.mark.parametrize("settings, words", [
    (DictSettings(layers=(0,), d_sae=64, k=65), "k (65) must be at most"),
    (DictSettings(layers=(5,), d_sae=64, k=4), "the model has layers 0 to 1"),
    (DictSettings(layers=(), d_sae=64, k=4), "at least one layer"),
    (DictSettings(layers=(0,), d_sae=10, k=4), "d_sae must be"),
])
def test_bad_settings_are_refused_in_one_line(corpus, tokenizer, folder, settings, words):
    with pytest.raises(TrainingRefused, match=re.escape(words)) as info:
        DictionaryJob(corpus, settings, model=small_model(), tokenizer=tokenizer, folder=folder)
    assert "\n" not in str(info.value)


def test_memory_cap_short_text_and_one_job_per_session(corpus, tokenizer, folder, monkeypatch):
    model = small_model()
    with pytest.raises(TrainingRefused, match="too short"):
        DictionaryJob("a few words", SMALL, model=model, tokenizer=tokenizer, folder=folder)
    monkeypatch.setenv("VIZ_MAX_TRAIN_MB", "50")
    with pytest.raises(TrainingRefused, match="VIZ_MAX_TRAIN_MB"):
        DictionaryJob(corpus, DictSettings(layers=(0, 1), d_sae=16384, k=32), model=model, tokenizer=tokenizer,
                      folder=folder)
    monkeypatch.delenv("VIZ_MAX_TRAIN_MB")
    registry = Registry(max_jobs=2)
    slow = DictSettings(layers=(0,), d_sae=64, k=4, steps=5000, batch_size=256)
    job = registry.start("s", corpus, slow, "x", make=DictionaryJob, model=model, tokenizer=tokenizer, folder=folder)
    try:
        with pytest.raises(TrainingRefused, match="already running in this session"):
            registry.start("s", corpus, slow, "x", make=DictionaryJob, model=model, tokenizer=tokenizer, folder=folder)
    finally:
        job.cancel()
        job.wait(30)


# ---- uploads ------------------------------------------------------------------------------------------------

def _zip(files: dict[str, bytes], compress=zipfile.ZIP_STORED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compress) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def _dictionary_files(tmp_path, hook="blocks.1.hook_resid_post", d_in=32, nan=False) -> dict[str, bytes]:
    d = SparseDictionary(d_in, 16, hook, "topk", 4)
    torch.manual_seed(0)
    with torch.no_grad():
        for p in d.parameters():
            p.normal_()
    out = save_dictionary(d, tmp_path / "d")
    if nan:
        tensors = {k: getattr(d, k).detach().clone() for k in ("W_enc", "b_enc", "W_dec", "b_dec")}
        tensors["b_enc"][0] = float("nan")
        save_file(tensors, str(out / "sae_weights.safetensors"))
    return {f"{hook}/cfg.json": (out / "cfg.json").read_bytes(),
            f"{hook}/sae_weights.safetensors": (out / "sae_weights.safetensors").read_bytes()}


def test_an_uploaded_set_round_trips(corpus, tokenizer, folder, tmp_path):
    model = small_model()
    job = run(DictionaryJob(corpus, SMALL, "stories", model=model, tokenizer=tokenizer, folder=folder / "trained"))
    dest = new_set_folder("test")
    try:
        folders = unpack_dictionaries(job.zip_bytes(), dest, model)
        assert [f.name for f in folders] == ["blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]
        for mine, back in zip(job.folders(), folders):
            assert torch.equal(load_dictionary(mine).W_dec, load_dictionary(back).W_dec)
            assert load_index(back).d_sae == 64
        single = unpack_dictionaries(_zip(_dictionary_files(tmp_path)), dest / "b", model)  # one folder, no index
        assert load_dictionary(single[0]).hook_name == "blocks.1.hook_resid_post"
    finally:
        shutil.rmtree(dest, ignore_errors=True)


def test_hostile_uploads_are_refused_in_one_line(tmp_path, folder):
    model = small_model()
    good = _dictionary_files(tmp_path)
    cfg = json.loads(good["blocks.1.hook_resid_post/cfg.json"])
    cases = {
        "not a zip": (b"PK\x03\x04 garbage", "not a readable zip"),
        "traversal": (_zip({"../evil/cfg.json": b"{}"}), "unsafe path"),
        "absolute": (_zip({"/etc/cfg.json": b"{}"}), "unsafe path"),
        "bomb": (_zip({"a/cfg.json": b"{" + b" " * 50_000_000 + b"}"}, zipfile.ZIP_DEFLATED), "zip bomb"),
        "kinds": (_zip({"a/run.py": b"print(1)"}), "unexpected member"),
        "empty": (_zip({"a/notes.txt": b"hello"}), "holds no dictionary"),
        "many": (_zip({f"d{i}/x.json": b"{}" for i in range(300)}), "entries"),
        "garbage cfg": (_zip({"a/cfg.json": b"{not json", "a/sae_weights.safetensors": b"x"}), "not valid JSON"),
        "foreign hook": (_zip({"a/cfg.json": json.dumps(dict(cfg, hook_name="blocks.9.hook_resid_post")).encode(),
                               "a/sae_weights.safetensors": good["blocks.1.hook_resid_post/sae_weights.safetensors"]}),
                         "not a hook of the loaded model"),
        "width": (_zip(_dictionary_files(tmp_path / "w", d_in=48)), "has width 32"),
        "nan": (_zip(_dictionary_files(tmp_path / "n", nan=True)), "NaN"),
        "corrupt weights": (_zip({"a/cfg.json": good["blocks.1.hook_resid_post/cfg.json"],
                                  "a/sae_weights.safetensors": b"\xff" * 64}), "cannot be read"),
    }
    link = io.BytesIO()
    with zipfile.ZipFile(link, "w") as archive:
        info = zipfile.ZipInfo("a/cfg.json")
        info.external_attr = (0o120777 << 16)
        archive.writestr(info, "/etc/passwd")
    cases["symlink"] = (link.getvalue(), "symbolic link")
    for name, (data, words) in cases.items():
        dest = folder / name.replace(" ", "_")
        dest.mkdir()
        with pytest.raises(DictionaryError) as info:
            unpack_dictionaries(data, dest, model, "upload.zip")
        assert words in str(info.value), (name, str(info.value))
        assert "\n" not in str(info.value), name
    with pytest.raises(DictionaryError, match="upload cap"):
        unpack_dictionaries(b"x" * (2 * 2**20), folder / "cap", model, max_mb=1)
