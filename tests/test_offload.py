"""Models larger than memory (accelerate's big-model inference, viz_model/placement.py): small random models loaded
with a ``max_memory`` below their size, so that some blocks really go to disk, must compute exactly what the same
model loaded whole computes: every hook, interventions, patching, attribution, generation with a KV cache. Bad
settings are one line. CPU here; tests/test_cuda.py spreads models over a GPU, the CPU and disk where torch sees a GPU."""

from __future__ import annotations

import re

import pytest
import torch

from hf_models import bart_config, build, gpt2_config, llama_config, save, transformers
from viz_model import CheckpointError, ablation, attribution, generate, load_model, patching
from viz_model.limits import check_resident_budget, count_params, estimate_bytes
from viz_model.placement import is_offloaded, module_weights, parse_placement, plan, resident_bytes, weight

ATOL = 1e-5
N_LAYERS = 4


def _bytes(module: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters())


def _cpu_budget(model) -> int:
    """A CPU budget that holds everything but the blocks, two blocks, and accelerate's reserve (the largest block):
    the last blocks cannot fit and go to disk."""
    block = max(_bytes(b) for b in model.blocks)
    rest = _bytes(model) - sum(_bytes(b) for b in model.blocks)
    return rest + 3 * block + block // 2


SPECS = {
    "llama": ("LlamaForCausalLM", lambda: llama_config(num_hidden_layers=N_LAYERS, tie_word_embeddings=False)),
    "gpt2": ("GPT2LMHeadModel", lambda: gpt2_config(n_layer=N_LAYERS, n_embd=48, n_head=4)),
}


@pytest.fixture(scope="module", params=sorted(SPECS))
def pair(request, tmp_path_factory):
    """(the model loaded whole, the same folder loaded with blocks on disk, the offload folder)."""
    cls, make = SPECS[request.param]
    root = tmp_path_factory.mktemp(request.param)
    folder = save(build(cls, make(), seed=5), root / "model")
    whole, _ = load_model(folder)
    offload = root / "offload"
    placed, _ = load_model(folder, device_map="auto", max_memory={"cpu": _cpu_budget(whole)}, offload_folder=offload)
    return whole, placed, offload


def _ids(model, n: int = 9, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, model.cfg.d_vocab, (1, n), generator=torch.Generator().manual_seed(seed))


def test_some_blocks_really_are_on_disk(pair):
    whole, placed, offload = pair
    device_map = placed.hf_device_map
    on_disk = [i for i in range(N_LAYERS) if any(device_map.get(k) == "disk" for k in (f"blocks.{i}", "blocks"))]
    in_memory = [i for i in range(N_LAYERS) if i not in on_disk]
    assert on_disk and in_memory, device_map
    for i in on_disk:  # between forward passes an offloaded block holds no values
        assert all(p.is_meta for p in placed.blocks[i].parameters())
        assert is_offloaded(placed.blocks[i].attn)
    for i in in_memory:
        assert not any(p.is_meta for p in placed.blocks[i].parameters())
    written = [p for p in offload.rglob("*.dat")]
    assert any(f"blocks.{on_disk[0]}." in p.name for p in written), [p.name for p in written]
    assert placed.device == torch.device("cpu")
    assert resident_bytes(placed, device_map) < _bytes(whole)


def test_logits_and_every_cached_activation_equal_the_whole_model(pair):
    whole, placed, _ = pair
    ids = _ids(whole)
    ref_logits, ref = whole.run_with_cache(ids)
    logits, cache = placed.run_with_cache(ids)
    torch.testing.assert_close(logits, ref_logits, atol=ATOL, rtol=0)
    assert set(cache) == set(ref) and len(ref) > 20 * N_LAYERS // 2
    for name in ref:
        torch.testing.assert_close(cache[name], ref[name], atol=ATOL, rtol=0, msg=name)


def test_no_fused_qkv_copy_of_an_offloaded_block_is_kept(pair):
    _, placed, _ = pair
    placed(_ids(placed))
    for block in placed.blocks:
        if is_offloaded(block.attn):
            assert "_fused" not in block.attn.__dict__
            assert all(p.is_meta for p in block.parameters())
        else:
            assert not block.attn._fused[0].is_meta


def test_weights_read_outside_a_forward_pass_are_the_real_ones(pair):
    whole, placed, _ = pair
    for i in range(N_LAYERS):
        for module, ref in ((placed.blocks[i].attn, whole.blocks[i].attn), (placed.blocks[i].mlp, whole.blocks[i].mlp)):
            for name, p in ref.named_parameters():
                torch.testing.assert_close(weight(module, name), p.detach(), atol=0, rtol=0)
        assert all(p.is_meta for p in placed.blocks[i].parameters()) == is_offloaded(placed.blocks[i].attn)
    torch.testing.assert_close(placed.W_unembed, whole.W_unembed, atol=0, rtol=0)


def test_run_with_hooks_head_ablation_equals(pair):
    whole, placed, _ = pair
    ids = _ids(whole, seed=1)
    heads = [(0, 1), (N_LAYERS - 1, 0), (N_LAYERS - 1, 2)]  # the last layer is on disk
    ref = ablation.ablate_heads(whole, ids, heads)
    torch.testing.assert_close(ablation.ablate_heads(placed, ids, heads), ref, atol=ATOL, rtol=0)
    assert (ref - whole(ids)).abs().max() > 1e-3  # the ablation changed something


def test_patching_sweep_and_attribution_equal(pair):
    whole, placed, _ = pair
    clean, corrupted = _ids(whole, seed=2), _ids(whole, seed=3)
    metric = patching.logit_diff_metric(3, 5)
    results = []
    for model in (whole, placed):
        _, cache = model.run_with_cache(clean)
        results.append((patching.get_act_patch_resid_pre(model, corrupted, cache, metric),
                        patching.get_act_patch_attn_head_out_all_pos(model, corrupted, cache, metric),
                        patching.component_outputs(model, cache),
                        attribution.direct_logit_attribution(model, cache, 7)))
    (a_resid, a_heads, a_parts, a_dla), (b_resid, b_heads, b_parts, b_dla) = results
    torch.testing.assert_close(b_resid, a_resid, atol=ATOL, rtol=0)
    torch.testing.assert_close(b_heads, a_heads, atol=ATOL, rtol=0)
    assert a_parts.keys() == b_parts.keys()
    for key in a_parts:
        torch.testing.assert_close(b_parts[key], a_parts[key], atol=ATOL, rtol=0)
    assert a_dla.keys() == b_dla.keys()
    assert all(abs(a_dla[k] - b_dla[k]) <= ATOL for k in a_dla), a_dla


def test_generation_with_a_kv_cache_equals(pair):
    whole, placed, _ = pair
    prompt = _ids(whole, n=5, seed=4)[0].tolist()
    a = generate(whole, prompt, 8, temperature=0.0, record=["blocks.3.attn.hook_k", "hook_logits"])
    b = generate(placed, prompt, 8, temperature=0.0, record=["blocks.3.attn.hook_k", "hook_logits"])
    assert [s.token_id for s in a] == [s.token_id for s in b]
    for x, y in zip(a, b):
        assert abs(x.model_prob - y.model_prob) <= ATOL
        for name in ("blocks.3.attn.hook_k", "hook_logits"):
            torch.testing.assert_close(y.cache[name], x.cache[name], atol=ATOL, rtol=0)


def _t5_config():
    return transformers.T5Config(vocab_size=97, d_model=36, d_kv=10, d_ff=50, num_layers=2, num_decoder_layers=2,
                                 num_heads=3, relative_attention_num_buckets=12, relative_attention_max_distance=20,
                                 feed_forward_proj="gated-gelu", decoder_start_token_id=0)


@pytest.mark.parametrize("name", ["t5", "bart", "moe"])
def test_encoder_decoders_and_experts_with_everything_on_disk(name, tmp_path):
    """Everything that can go to disk does (max_memory 0): T5's relative position bias, read by every attention layer
    outside its own forward, stays in memory; the shipped mixture of experts runs its experts through hidden() and
    project(), not their forward (a block is loaded whole)."""
    if name == "moe":
        from conftest import ROOT
        source = ROOT / "assets" / "models" / "tinystories-moe.safetensors"
    else:
        cls, config = {"t5": ("T5ForConditionalGeneration", _t5_config),
                       "bart": ("BartForConditionalGeneration", bart_config)}[name]
        source = save(build(cls, config(), seed=2), tmp_path / name)
    whole, _ = load_model(source)
    placed, _ = load_model(source, max_memory={"cpu": 0}, offload_folder=tmp_path / "offload")
    assert all(p.is_meta for p in placed.blocks.parameters())
    if whole.cfg.is_encoder_decoder:
        assert all(p.is_meta for p in placed.encoder.blocks.parameters())
    for module in placed.modules():
        if type(module).__name__ == "RelativePositionBias":
            assert not module.W_rel.is_meta
    ids = _ids(whole, n=6)
    kwargs = {"src_tokens": _ids(whole, n=7, seed=9)} if whole.cfg.is_encoder_decoder else {}
    ref_logits, ref = whole.run_with_cache(ids, **kwargs)
    logits, cache = placed.run_with_cache(ids, **kwargs)
    torch.testing.assert_close(logits, ref_logits, atol=ATOL, rtol=0)
    for key in ref:
        torch.testing.assert_close(cache[key], ref[key], atol=ATOL, rtol=1e-6, msg=key)


@pytest.fixture(scope="module")
def llama_folder(tmp_path_factory):
    return save(build("LlamaForCausalLM", llama_config(num_hidden_layers=2), seed=1), tmp_path_factory.mktemp("l") / "m")


def test_a_dict_device_map_puts_the_named_block_on_disk(llama_folder, tmp_path):
    whole, _ = load_model(llama_folder)
    placed, _ = load_model(llama_folder, device_map={"": "cpu", "blocks.1": "disk"}, offload_folder=tmp_path)
    assert all(p.is_meta for p in placed.blocks[1].parameters())
    assert not any(p.is_meta for p in placed.blocks[0].parameters())
    ids = _ids(whole)
    torch.testing.assert_close(placed(ids), whole(ids), atol=ATOL, rtol=0)


@pytest.mark.parametrize("kwargs, says", [
    (dict(device_map="balanced"), "not 'auto'"),
    (dict(device_map={"blocks.7": "cpu", "": "cpu"}), "no module"),
    (dict(device_map={"": "tpu"}), "not a device"),
    (dict(device_map={"": 3}), "no such GPU"),
    (dict(device_map={"": True}), "not a device"),
    (dict(device_map={"embed": "cpu"}), "no device for"),
    (dict(device_map={"": "cpu", "blocks.0": "disk"}), "no offload_folder"),
    (dict(device_map=[1, 2]), "must be 'auto'"),
    (dict(max_memory="cpu=lots"), "not a size"),
    (dict(max_memory="cpu"), "not of the form"),
    (dict(max_memory={"cpu": -1}), "negative"),
    (dict(max_memory={"cpu": "-2GB"}), "negative"),
    (dict(max_memory={"cpu": float("nan")}), "whole number"),
    (dict(max_memory={"cpu": 2**70}), "2^60"),
    (dict(max_memory={"disk": "1GB"}), "disk has no memory"),
    (dict(max_memory={"cpu": 1000}), "no offload_folder"),
    (dict(offload_folder=3), "must be a folder"),
    (dict(offload_folder=""), "must be a folder"),
    (dict(max_memory={"cpu": "1GB", f"cuda:{torch.cuda.device_count()}": "1GB"}), "no such GPU"),  # one past the last
])
def test_bad_settings_are_one_line(llama_folder, kwargs, says):
    with pytest.raises(CheckpointError) as info:
        load_model(llama_folder, **kwargs)
    message = str(info.value)
    assert "\n" not in message and says in message, message


def test_an_offload_folder_that_is_a_file_is_one_line(llama_folder, tmp_path):
    path = tmp_path / "file"
    path.write_text("x")
    with pytest.raises(CheckpointError, match="offload_folder") as info:
        load_model(llama_folder, max_memory={"cpu": 1000}, offload_folder=path)
    assert "\n" not in str(info.value)


def test_the_memory_check_counts_only_what_stays_in_memory(llama_folder, tmp_path, monkeypatch):
    whole, _ = load_model(llama_folder)
    cfg = whole.cfg
    params = _bytes(whole)
    # the resident estimate with every weight resident is estimate_bytes itself, and it falls with fewer bytes
    assert check_resident_budget(cfg, params) == estimate_bytes(cfg)
    assert check_resident_budget(cfg, params // 4) < estimate_bytes(cfg)
    placement = parse_placement({"": "cpu", "blocks.1": "disk"}, None, tmp_path)
    resident = resident_bytes(whole, plan(whole, placement))
    assert resident == params  # block 1 is loaded while it runs: as large as block 0, nothing is saved
    placement = parse_placement({"": "disk"}, None, tmp_path)
    device_map = plan(whole, placement)
    resident = resident_bytes(whole, device_map)
    root = sum(p.numel() * p.element_size() for p in whole.parameters(recurse=False))  # stays on the main device
    assert resident == root + max(_bytes(b) for b in whole.blocks)
    # free memory between the two estimates: refused whole, loaded with its blocks on disk
    free = (check_resident_budget(cfg, resident) + estimate_bytes(cfg)) // 2  # as if this much memory were free
    monkeypatch.setattr("viz_model.limits.free_memory_bytes", lambda: free)
    monkeypatch.setenv("VIZ_MEMORY_MARGIN_MB", "0")
    with pytest.raises(CheckpointError, match="put blocks on disk"):
        load_model(llama_folder)
    placed, _ = load_model(llama_folder, device_map={"": "disk"}, offload_folder=tmp_path)
    assert all(p.is_meta for p in placed.blocks.parameters())


def test_app_settings_from_the_command_line_and_the_environment(monkeypatch):
    from viz_ui.app.state import placement_settings

    argv = ["--device-map", "auto", "--max-memory", "cpu=2GB", "--offload-folder", "/tmp/x"]
    assert placement_settings(argv) == {"device_map": "auto", "max_memory": "cpu=2GB", "offload_folder": "/tmp/x"}
    assert placement_settings(["--device-map", '{"": "cpu"}'])["device_map"] == {"": "cpu"}
    monkeypatch.setenv("VIZ_DEVICE_MAP", "auto")
    monkeypatch.setenv("VIZ_MAX_MEMORY", "cpu=1GB")
    assert placement_settings([]) == {"device_map": "auto", "max_memory": "cpu=1GB", "offload_folder": None}
    monkeypatch.delenv("VIZ_DEVICE_MAP")
    monkeypatch.delenv("VIZ_MAX_MEMORY")
    assert placement_settings([]) == {"device_map": None, "max_memory": None, "offload_folder": None}
    assert re.search("--device-map", placement_settings.__doc__)


def test_the_app_runs_a_model_with_blocks_on_disk(tmp_path, monkeypatch):
    """``streamlit run app.py -- --model PATH --max-memory cpu=N --offload-folder DIR``: the attention page draws the
    pattern of a head whose block is on disk as the whole model computes it, and Cause and effect renders."""
    import shutil

    import numpy as np
    from streamlit.testing.v1 import AppTest

    from conftest import ROOT, plotly_array, shown_figures

    path = tmp_path / "offloaded.safetensors"  # a path of its own: the app's model cache is keyed by path
    shutil.copy(ROOT / "assets" / "models" / "tinystories-6l.safetensors", path)
    whole, tok = load_model(path)
    budget = _bytes(whole) * 6 // 10
    device_map = plan(whole, parse_placement("auto", {"cpu": budget}, tmp_path))
    layer = whole.cfg.n_layers - 1
    assert any(device_map.get(k) == "disk" for k in (f"blocks.{layer}", "blocks", "")), device_map
    monkeypatch.setattr("sys.argv", ["app.py", "--model", str(path), "--max-memory", f"cpu={budget}",
                                     "--offload-folder", str(tmp_path / "offload")])
    text = "The cat sat on the mat. The cat sat."
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.session_state["_text"] = text
    at.run()
    at.switch_page("pages/attention.py").run()
    assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    assert list((tmp_path / "offload").rglob("*.dat"))  # the app's model wrote its offloaded blocks
    at.selectbox(key="layer").set_value(layer).run()
    at.selectbox(key="head").set_value(1).run()
    _, cache = whole.run_with_cache(torch.tensor([tok.encode(text).ids]))
    shown = next(f for f in shown_figures(at) if f["layout"]["title"]["text"].startswith(f"Layer {layer}, head 1"))
    np.testing.assert_allclose(plotly_array(shown["data"][0]["z"]), cache[f"blocks.{layer}.attn.hook_pattern"][0, 1],
                               atol=1e-5)
    at.switch_page("pages/interventions.py").run()
    assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    assert shown_figures(at)
    from helpers import PAGES
    for page in PAGES:  # every other page reads the placed model too (weights on the step-by-step, block,
        at.switch_page(page).run()  # embeddings and inspector pages)
        assert not at.exception and not at.error, (page, [e.value for e in [*at.exception, *at.error]])
    at.switch_page("pages/inspector.py").run()  # its table says where each block's weights are
    assert any("on disk (accelerate device map)" in str(v) for t in at.dataframe for v in t.value["value"])


def test_module_weights_lists_every_parameter_with_its_real_values(pair):
    whole, placed, _ = pair
    for i in range(N_LAYERS):
        got = dict(module_weights(placed.blocks[i]))
        ref = dict(whole.blocks[i].named_parameters())
        assert got.keys() == ref.keys()
        for name in ref:
            torch.testing.assert_close(got[name], ref[name].detach(), atol=0, rtol=0)


def test_each_load_offloads_into_a_private_folder_removed_with_the_model(llama_folder, tmp_path):
    import gc

    first, _ = load_model(llama_folder, device_map={"": "cpu", "blocks.1": "disk"}, offload_folder=tmp_path)
    second, _ = load_model(llama_folder, device_map={"": "cpu", "blocks.0": "disk"}, offload_folder=tmp_path)
    folders = sorted(p for p in tmp_path.iterdir())
    assert len(folders) == 2 and all((p / "index.json").is_file() for p in folders)  # never one shared index
    del first, second
    gc.collect()
    assert not any(p.exists() for p in folders)


def test_a_converting_load_must_fit_whole_before_its_blocks_go_to_disk(llama_folder, tmp_path, monkeypatch):
    """A float32 file loaded as bfloat16 is converted whole in memory before the blocks are placed: with memory for
    the placed model but not for the whole conversion it is refused in one line that says to keep the file's dtype;
    the same file in its own dtype loads with its blocks on disk."""
    whole, _ = load_model(llama_folder)
    assert whole.dtype == torch.float32
    cfg = whole.cfg
    del whole
    converting = estimate_bytes(cfg, 2) + 2 * count_params(cfg)  # bfloat16 model + the float32 file's excess
    monkeypatch.setattr("viz_model.limits.free_memory_bytes", lambda: converting - 1)
    monkeypatch.setenv("VIZ_MEMORY_MARGIN_MB", "0")
    with pytest.raises(CheckpointError, match=r"checkpoint's own dtype \(dtype='auto'\)") as info:
        load_model(llama_folder, dtype="bfloat16", device_map={"": "disk"}, offload_folder=tmp_path)
    assert "\n" not in str(info.value)
    placed, _ = load_model(llama_folder, dtype="auto", device_map={"": "disk"}, offload_folder=tmp_path)
    assert all(p.is_meta for p in placed.blocks.parameters())


def test_sessions_running_an_offloaded_model_at_once_each_get_its_numbers(pair):
    """Every session of the app runs the one shared model in its own thread: an offloaded block's weights are loaded
    for its forward and put back on ``meta`` after it, so two threads inside the same block must not unload each
    other's weights (a meta-tensor error, or a KeyError in accelerate's tied-parameter map)."""
    import threading

    whole, placed, _ = pair
    inputs = [_ids(whole, seed=s) for s in range(4)]
    refs = [whole.run_with_cache(ids)[1] for ids in inputs]
    w_ref = {name: p.detach() for name, p in whole.blocks[N_LAYERS - 1].attn.named_parameters()}
    errors, wrong = [], []
    start = threading.Barrier(len(inputs) + 1)

    def run(i: int) -> None:
        try:
            start.wait(10)
            for _ in range(6):
                _, cache = placed.run_with_cache(inputs[i])
                wrong.extend(n for n in refs[i] if not torch.allclose(cache[n], refs[i][n], atol=ATOL, rtol=0))
        except Exception as exc:  # noqa: BLE001  reported below
            errors.append(repr(exc))

    def read() -> None:
        try:
            start.wait(10)
            for _ in range(30):
                for name, ref in w_ref.items():
                    if not torch.equal(weight(placed.blocks[N_LAYERS - 1].attn, name), ref):
                        wrong.append(name)
        except Exception as exc:  # noqa: BLE001
            errors.append(repr(exc))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(inputs))] + [threading.Thread(target=read)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and not wrong, (errors[:3], wrong[:5])


def test_the_contribution_graph_equals_the_whole_models(pair):
    """The circuits' contribution graph reads W_O and the norms' weights through placement.weight (offloaded blocks
    hold meta tensors between forward passes)."""
    from viz_model.circuits.contribution import contribution_graph
    whole, placed, _ = pair
    ids = _ids(whole, seed=4)
    ref, got = contribution_graph(whole, ids), contribution_graph(placed, ids)
    for name in ("attn", "attn_resid", "mlp", "mlp_resid"):
        torch.testing.assert_close(getattr(got, name), getattr(ref, name), atol=1e-4, rtol=0)
