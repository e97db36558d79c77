"""Long texts, many heads and hostile tokenizers: attention memory stays within its budget (blocked forward pass,
token cap, bounded "Measure"), tokenizer failures and panics become one-line messages, and strings from files
show literally on the page."""

from __future__ import annotations

import html as html_module
import json
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest
from tokenizers import Regex, Tokenizer, models, pre_tokenizers

from conftest import ROOT, plotly_array, small_model
from helpers import child_env
from viz_model import Config, VizTransformer
from viz_model.components import chunked_attention, masked_scores
from viz_model.limits import attention_bytes, attn_budget_bytes, max_tokens_for_budget
from viz_ui.analysis.cost import attention_cost, cost_lengths
from viz_ui.app.state import SessionModel
from viz_ui.analysis.text import WORD_JOINER, error_line, plain, recoverable
from viz_ui.analysis.text_trace import encode_text, run_trace, token_limit, tokenizer_errors

TINY_MB = "0.002"  # ~2 KB: every attention layer of the small models below works in blocks of rows and heads

CONFIGS = {
    "mha-causal": {},
    "gqa-rotary": dict(n_heads=4, n_kv_heads=2, positional="rotary", norm="rmsnorm", mlp="swiglu"),
    "bidirectional": dict(causal=False),
    "sliding-window": dict(attn_window=5, positional="rotary"),
    "none-positional": dict(positional="none"),
}


def _z_and_logits(model, tokens, **kwargs):
    logits, cache = model.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_z"), **kwargs)
    return logits, {k: v.clone() for k, v in cache.items()}


@pytest.mark.parametrize("name", CONFIGS)
def test_blocked_attention_equals_the_whole_one(name, monkeypatch):
    model = small_model(**CONFIGS[name])
    tokens = torch.randint(0, model.cfg.d_vocab, (2, 40), generator=torch.Generator().manual_seed(1))
    whole_logits, whole_z = _z_and_logits(model, tokens)
    monkeypatch.setenv("VIZ_ATTN_BUDGET_MB", TINY_MB)
    assert attention_bytes(2 * model.cfg.n_heads, 40, 40) > attn_budget_bytes()
    logits, z = _z_and_logits(model, tokens)
    torch.testing.assert_close(logits, whole_logits, atol=1e-6, rtol=0)
    for hook in whole_z:
        torch.testing.assert_close(z[hook], whole_z[hook], atol=1e-6, rtol=0)
    # the patterns are still the model's own (computed from q and k on reading), rows summing to 1
    _, cache = model.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_pattern"))
    pattern = cache["blocks.1.attn.hook_pattern"]
    torch.testing.assert_close(pattern.sum(-1), torch.ones(pattern.shape[:-1]))


@pytest.mark.parametrize("budget", [1, 64, 700, 5_000, 50_000, 10**9])
@pytest.mark.parametrize("name", ["mha-causal", "gqa-rotary", "sliding-window", "bidirectional"])
def test_chunked_attention_at_every_block_size(name, budget):
    """Blocks of one row of one head (budget 1 byte) up to everything at once, queries after earlier keys (a KV
    cache: 7 new queries over 30 keys)."""
    cfg = small_model(**CONFIGS[name]).cfg
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 7, cfg.n_heads, cfg.d_head, generator=gen)
    k = torch.randn(2, 30, cfg.n_kv_heads, cfg.d_head, generator=gen)
    v = torch.randn(2, 30, cfg.n_kv_heads, cfg.d_head, generator=gen).repeat_interleave(cfg.n_rep, dim=2)
    expected = (torch.softmax(masked_scores(q, k, cfg), -1) @ v.transpose(1, 2)).transpose(1, 2)
    torch.testing.assert_close(chunked_attention(q, k, v, cfg, budget=budget), expected, atol=1e-6, rtol=0)


def test_kv_cache_generation_and_cross_attention_in_blocks(monkeypatch):
    model = small_model(**CONFIGS["gqa-rotary"])
    tokens = torch.randint(0, 320, (1, 30), generator=torch.Generator().manual_seed(2))
    whole = model(tokens)
    monkeypatch.setenv("VIZ_ATTN_BUDGET_MB", TINY_MB)
    cache = model.new_kv_cache()
    parts = [model(tokens[:, :12], kv_cache=cache), model(tokens[:, 12:20], kv_cache=cache),
             model(tokens[:, 20:], kv_cache=cache)]
    torch.testing.assert_close(torch.cat(parts, dim=1), whole, atol=1e-5, rtol=0)

    from test_seq2seq import seq2seq_model
    s2s = seq2seq_model()
    src, tgt = torch.randint(3, 320, (1, 20)), torch.randint(3, 320, (1, 15))
    monkeypatch.delenv("VIZ_ATTN_BUDGET_MB")
    whole = s2s(tgt, src_tokens=src)
    monkeypatch.setenv("VIZ_ATTN_BUDGET_MB", TINY_MB)
    torch.testing.assert_close(s2s(tgt, src_tokens=src), whole, atol=1e-6, rtol=0)


def test_a_hook_on_the_pattern_still_sees_and_may_change_the_whole_tensor(monkeypatch):
    monkeypatch.setenv("VIZ_ATTN_BUDGET_MB", TINY_MB)
    model = small_model()
    tokens = torch.randint(0, 320, (1, 20))
    seen = []
    with model.hooks([("blocks.0.attn.hook_pattern", lambda x, hook: seen.append(x.shape))]):
        model(tokens)
    assert seen == [(1, 4, 20, 20)]
    _, cache = model.run_with_cache(tokens, kv_cache=model.new_kv_cache())  # stored (not derived) during generation
    assert cache["blocks.1.attn.hook_attn_scores"].shape == (1, 4, 20, 20)


def test_budget_formula_and_setting(monkeypatch):
    mb = 2**20
    for heads, n in [(12, 2364), (32, 1448), (512, 362)]:
        assert max_tokens_for_budget(heads, 512 * mb) == n
        assert attention_bytes(heads, n, n) <= 512 * mb < attention_bytes(heads, n + 1, n + 1)
    assert max_tokens_for_budget(10**6, 1) == 1
    monkeypatch.delenv("VIZ_ATTN_BUDGET_MB", raising=False)
    assert attn_budget_bytes() == 512 * mb
    monkeypatch.setenv("VIZ_ATTN_BUDGET_MB", "64")
    assert attn_budget_bytes() == 64 * mb
    for junk in ("lots", "nan", "inf", "-5"):
        monkeypatch.setenv("VIZ_ATTN_BUDGET_MB", junk)
        assert attn_budget_bytes() in (512 * mb, 1)


MEASURE = textwrap.dedent("""
    import os, sys, time
    import torch
    from viz_model import Config, VizTransformer
    from viz_model.tokenizer import train_bpe
    from viz_ui.analysis.text_trace import run_trace

    def status(key):
        return next(int(l.split()[1]) / 1024 for l in open("/proc/self/status") if l.startswith(key))

    def peak_of(fn):
        base = status("VmRSS:")
        open("/proc/self/clear_refs", "w").write("5")  # resets VmHWM, the peak resident size
        t0 = time.perf_counter()
        out = fn()
        return status("VmHWM:") - base, time.perf_counter() - t0, out

    cfg = Config(n_layers=1, n_heads=512, d_head=4, d_model=64, d_mlp=64, d_vocab=320, n_ctx=20000, positional="none")
    model = VizTransformer(cfg).eval()
    tokens = torch.randint(0, 320, (1, 600))
    with torch.no_grad():
        fwd_mb, fwd_s, _ = peak_of(lambda: model(tokens))
    corpus = open({tests!r} + "/data/stories.txt", encoding="utf-8").read()
    tok = train_bpe([corpus], vocab_size=320)
    text = (corpus * (1 + 20000 // len(corpus)))[:20000]
    trace_mb, trace_s, trace = peak_of(lambda: run_trace(model, tok, text))
    read_mb, _, pattern = peak_of(lambda: trace.arrays["blocks.0.attn.hook_pattern"])
    print({{"forward_mb": fwd_mb, "forward_s": fwd_s, "trace_mb": trace_mb, "trace_s": trace_s, "read_mb": read_mb,
           "n_tokens": trace.n_tokens, "total": trace.n_tokens_total, "pattern": list(pattern.shape)}})
""")


def test_512_heads_on_a_long_text_stay_within_the_budget():
    """A 512-head model without positional table: 600 tokens through the forward pass, and a 20,000-character
    text through run_trace, with a 32 MB budget. Unbounded, the forward alone would hold 2 · 512 · 600² · 4 bytes
    = 1.4 GB, and the trace's 20,000 characters (~5,000 tokens) 100 GB."""
    code = MEASURE.format(tests=str(ROOT / "tests"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=child_env(inherit=False, VIZ_ATTN_BUDGET_MB="32", PATH="/usr/bin:/bin", OMP_NUM_THREADS="1"))
    assert out.returncode == 0, out.stderr[-2000:]
    found = eval(out.stdout.strip().splitlines()[-1])
    cap = max_tokens_for_budget(512, 32 * 2**20)
    assert found["n_tokens"] == cap < 100 and found["total"] > 4000 and found["pattern"] == [512, cap, cap]
    for key in ("forward_mb", "trace_mb", "read_mb"):
        assert found[key] < 4 * 32 + 64, found  # budget plus blocks' slack, far below 1,400 MB


def test_run_trace_cuts_to_the_budget_and_says_why(tokenizer, monkeypatch):
    monkeypatch.setenv("VIZ_ATTN_BUDGET_MB", "8")
    model = small_model(n_heads=64, d_head=2, n_ctx=20000, positional="none", n_layers=2)
    cap = max_tokens_for_budget(64, 8 * 2**20)
    assert token_limit(model.cfg) == (cap, cap) and cap < 200
    text = ("Once upon a time a little dog ran in the park. " * 500)[:20000]
    trace = run_trace(model, tokenizer, text)
    assert trace.n_tokens == trace.token_limit == trace.memory_limit == cap
    assert trace.truncated and trace.cut_by_memory and trace.n_tokens_total > 2000
    assert "memory budget" in trace.cut_message and f"first {cap}" in trace.cut_message
    assert "blocks.0.attn.hook_pattern" in trace.arrays.derived  # 2 layers of 64 heads: over budget, not stored
    pattern = trace.arrays["blocks.0.attn.hook_pattern"]
    _, cache = model.run_with_cache(torch.tensor([trace.ids.tolist()]))
    np.testing.assert_allclose(pattern, cache["blocks.0.attn.hook_pattern"][0].numpy(), atol=1e-6)

    short = small_model(n_ctx=30)  # cut by the context: the old attributes and the context's message
    trace = run_trace(short, tokenizer, text[:2000])
    assert trace.truncated and not trace.cut_by_memory and trace.memory_limit is None and trace.n_tokens == 30
    assert "context is 30 tokens" in trace.cut_message
    whole = run_trace(short, tokenizer, "A dog.")
    assert not whole.truncated and whole.cut_message is None


def panicking_tokenizer() -> Tokenizer:
    """A real hostile tokenizer: its pre-tokenizer's regex backtracks catastrophically on "aaaa…", Oniguruma
    gives up ("retry-limit-in-match over") and the Rust code panics (pyo3_runtime.PanicException, a
    BaseException)."""
    tok = Tokenizer(models.WordLevel({"a": 0, "b": 1, "<unk>": 2}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("(a+)+b"), "isolated")
    return tok


def test_a_panicking_tokenizer_gives_a_clear_error_and_the_next_text_works():
    model, tok = small_model(), panicking_tokenizer()
    with pytest.raises(BaseException) as raw:
        tok.encode("a" * 40)
    assert not isinstance(raw.value, Exception) and recoverable(raw.value)  # a panic: no Exception
    with pytest.raises(ValueError, match="tokenizer failed on this text.*retry-limit"):
        run_trace(model, tok, "a" * 40)
    assert run_trace(model, tok, "ab ba").n_tokens > 0
    assert not recoverable(KeyboardInterrupt()) and not recoverable(SystemExit())


def test_any_tokenizer_error_becomes_a_value_error(tokenizer):
    class Broken:
        def encode(self, text):
            raise RuntimeError("boom\nsecond line")

    with pytest.raises(ValueError, match=r"^the tokenizer failed on this text \(boom\)$"):
        encode_text(Broken(), "hi")
    with pytest.raises(ValueError, match="no tokens"):
        run_trace(small_model(), tokenizer, "")
    with pytest.raises(ValueError, match=r"^the output cannot be decoded \(Onig"):
        with tokenizer_errors("the output cannot be decoded"):
            raise _panic()
    with pytest.raises(KeyboardInterrupt):
        with tokenizer_errors("never"):
            raise KeyboardInterrupt


def test_the_page_shows_a_tokenizer_panic_and_carries_on():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.session_state["_session_models"] = {"upload:evil": SessionModel("evil", small_model(), panicking_tokenizer(), "x")}
    at.session_state["_model"] = "evil"
    at.session_state["_text"] = "a" * 40
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("cannot be run" in e.value and "tokenizer failed" in e.value for e in at.error)
    at.text_area(key="text").set_value("ab ab ba").run()
    assert not at.exception and not at.error


def _inspector(monkeypatch, fail) -> AppTest:
    import viz_model

    def load_upload(name, data, progress=None, max_mb=None, dtype=None, device=None):
        raise fail

    monkeypatch.setattr(viz_model, "load_upload", load_upload)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    at.switch_page("pages/inspector.py").run()
    return at


def _panic() -> BaseException:
    try:
        panicking_tokenizer().encode("a" * 40)
    except BaseException as exc:  # noqa: BLE001  (the panic itself is what the test needs)
        return exc
    raise AssertionError("the tokenizer did not panic")


@pytest.mark.parametrize("fail", [RuntimeError("torch said\nno"), "panic", KeyError("W_Q")])
def test_an_upload_that_fails_in_any_way_is_one_error_line(monkeypatch, fail):
    fail = _panic() if fail == "panic" else fail
    at = _inspector(monkeypatch, fail)
    model_before = at.selectbox(key="model").value
    name = "![x](http:evil.example) **bold**.safetensors"
    at.file_uploader(key="upload_model").set_value((name, b"not a model", "application/octet-stream")).run()
    assert not at.exception, [e.value for e in at.exception]
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "cannot be loaded" in errors[0] and "previous model is still selected" in errors[0]
    assert plain(name) in errors[0] and "\n" not in errors[0]
    assert at.selectbox(key="model").value == model_before


def test_an_uploaded_model_and_its_name_show_as_plain_text():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    at.switch_page("pages/inspector.py").run()
    data = (ROOT / "assets" / "models" / "dates-iso.safetensors").read_bytes()
    at.file_uploader(key="upload_model").set_value(("_x_ [a](b).safetensors", data, "application/octet-stream")).run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(plain("_x_ [a](b).safetensors") in s.value for s in at.success)
    assert any(plain("_x_ [a](b).safetensors (upload)") in h.value for h in at.subheader)


def test_measure_is_bounded_by_the_budget(monkeypatch):
    monkeypatch.delenv("VIZ_ATTN_BUDGET_MB", raising=False)
    many = Config(n_layers=1, n_heads=512, d_head=2, d_model=64, d_mlp=64, d_vocab=320, n_ctx=4096)
    lengths, note = cost_lengths(many)
    assert lengths == [64, 128, 256] and "512 heads" in note and "VIZ_ATTN_BUDGET_MB" in note
    assert all(attention_bytes(512, n, n) <= attn_budget_bytes() for n in lengths)
    lengths, note = cost_lengths(Config(n_layers=1, n_heads=12, d_head=2, d_model=64, d_mlp=64, d_vocab=320,
                                        n_ctx=1024))
    assert lengths == [64, 128, 256, 512, 1024] and note is None
    monkeypatch.setenv("VIZ_ATTN_BUDGET_MB", "1")  # even a tiny budget gives a curve of several points
    lengths, note = cost_lengths(many)
    assert len(lengths) >= 3 and attention_bytes(512, lengths[-1], lengths[-1]) <= 2**20 and note
    frame = attention_cost(VizTransformer(many), [8, 4096], repeats=1)  # 4,096 would be 64 GB: skipped
    assert frame["n"].tolist() == [8]


UNSAFE = ["![x](http://evil/x.png)", "<img src=x onerror=alert(1)>", "[click](javascript:alert(1))",
          ":material/home: :red[red] :smile: $x^2$ $$y$$", "# title\n===\n1. item\n- dash\n> quote",
          "a*b*c_d_ `code` ~~s~~ | t | \\* &lt; &amp;", "www.evil.com mail@evil.com https://evil.com <http://evil.com>",
          "<script>alert(1)</script>", "[ref]: http://evil\n[ref]", "{#id} (x) +1 -1 2.5 ! ~"]


@pytest.mark.parametrize("text", UNSAFE)
def test_plain_text_renders_literally(text):
    from markdown_it import MarkdownIt

    html = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"]).render(plain(text))
    assert not re.search(r"<(img|a|script|h\d|ol|ul|li|em|strong|code|del|table|blockquote)\b", html), html
    shown = html_module.unescape(re.sub(r"</?p>", "", html).strip())
    assert shown.replace(WORD_JOINER, "") == re.sub(r"\s+", " ", text)  # every character visible, breaks as spaces
    # Streamlit's icons (":material/x:" becomes ":material_x:" before parsing), emoji shortcodes and GFM's bare
    # links are matched on the parsed text, and its ":color[...]" directives before: none may remain
    assert ":material/" not in plain(text) and not re.search(r"(?<!\\):\w+\[", plain(text))
    assert not re.search(r":[\w+-][\w/+-]*:|https?://|www\.|\w@\w", shown), shown


def test_plain_cuts_long_strings_and_error_line_keeps_one_line():
    assert plain("x" * 1000).endswith("…") and len(plain("x" * 1000)) == 300
    assert plain(None) == "" and plain(12) == "12"
    assert error_line(RuntimeError("first\nsecond")) == "first" and error_line(RuntimeError()) == "RuntimeError"
    assert json.loads(json.dumps(plain("ok")))


def test_the_inspector_measures_512_heads_within_the_budget(monkeypatch):
    monkeypatch.setenv("VIZ_ATTN_BUDGET_MB", "16")
    cfg = Config(n_layers=1, n_heads=512, d_head=2, d_model=64, d_mlp=64, d_vocab=320, n_ctx=20000, positional="none")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.session_state["_session_models"] = {"upload:many": SessionModel("many", VizTransformer(cfg).eval(), None, "x")}
    at.session_state["_model"] = "many"
    at.session_state["_text"] = " ".join(["7"] * 300)  # token ids (no tokenizer): cut to the budget's 64 tokens
    at.run()
    at.switch_page("pages/inspector.py").run()
    assert any("Measured up to n = 64 only" in c.value for c in at.caption)
    next(b for b in at.button if b.label == "Measure on this machine").click().run()
    assert not at.exception, [e.value for e in at.exception]
    from helpers import figure_titled
    assert plotly_array(figure_titled(at, "One attention layer")["data"][0]["x"]).tolist() == [8, 16, 32, 64]


class _FailingDecoder:
    """A tokenizer whose decode fails the way an uploaded one may (any exception, or a Rust panic)."""

    def decode(self, ids, skip_special_tokens=True):
        raise RuntimeError("decoder exploded\nsecond line")


def test_decoding_failures_become_one_line_value_errors():
    from viz_ui.analysis.generation import continuation_text
    from viz_ui.analysis.encoder_decoder import output_text
    with pytest.raises(ValueError, match=r"cannot be decoded \(.*decoder exploded"):
        continuation_text(_FailingDecoder(), [1, 2], [3])
    with pytest.raises(ValueError, match="cannot be decoded") as info:
        output_text(_FailingDecoder(), [1, 2, 0], 0)
    assert "\n" not in str(info.value)
