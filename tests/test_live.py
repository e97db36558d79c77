"""Training live on the server (viz_model.training.live) and the "Train your own" page: it learns, stops when
asked or at the time limit with a usable model, refuses what the limits forbid with one line, and the page shows
the job's own numbers."""

import io
import threading
import time

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from conftest import plotly_array
from helpers import figure_titled, open_page
from viz_model import jobs, load_model
from viz_model.training import live
from viz_model.training.live import (SHIPPED_TEXT, Registry, ServerBusy, TrainingRefused, TrainJob, TrainSettings,
                                     snapshot_steps, window_loss)
from viz_model.training.train import encode, evaluate

TEXT = SHIPPED_TEXT.read_text(encoding="utf-8")[:30_000]
TINY = TrainSettings(n_layers=1, n_heads=2, d_model=32, n_ctx=32, steps=60, vocab_size=300, batch_size=8, lr=1e-2)
LONG = TrainSettings(n_layers=1, n_heads=2, d_model=32, n_ctx=32, steps=3000, vocab_size=300, batch_size=8)


def wait_for_step(job, step: int, timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while job.progress().step < step and job.running and time.monotonic() < end:
        time.sleep(0.05)
    assert job.progress().step >= step, job.progress()


@pytest.fixture(scope="module")
def trained():
    job = TrainJob(TEXT, TINY, "test text").start()
    assert job.wait(60)
    return job


def test_a_job_learns_and_keeps_a_timeline(trained):
    p = trained.progress()
    assert (p.status, p.step, len(p.losses), p.error) == ("done", 60, 60, None)
    assert np.mean(p.losses[-10:]) < p.losses[0] - 1.5  # ln 300 = 5.7 at initialisation
    t = trained.timeline()
    assert t["steps"] == snapshot_steps(60) == p.snapshot_steps and t["steps"][0] == 0 and t["steps"][-1] == 60
    assert t["valid_loss"][-1] < t["valid_loss"][0] - 1.0 and t["train_loss"][-1] < t["train_loss"][0] - 1.0
    # the snapshot's weights are the model's at that step: its held-out loss again, to fp16 rounding
    ids = encode(trained.tokenizer, live.split_text(TEXT)[1])
    assert window_loss(trained.snapshot_model(-1), ids) == pytest.approx(t["valid_loss"][-1], abs=0.02)
    assert trained.threads_used == 1 and torch.get_num_threads() == jobs._PROCESS_THREADS  # only its own thread


def test_batched_window_loss_is_the_cli_evaluation(trained):
    model, tok = trained.latest_model(), trained.tokenizer
    ids = encode(tok, TEXT[:3000])[:150]  # 4 full windows of 32 and a short one
    assert window_loss(model, ids) == pytest.approx(evaluate(model, tok, ids).nats_per_token, rel=1e-5)


def test_the_checkpoint_is_the_trained_model(trained, tmp_path):
    path = tmp_path / "m.safetensors"
    path.write_bytes(trained.checkpoint_bytes())
    model, tok = load_model(path)
    ids = torch.tensor([tok.encode("Lily saw a big dog.").ids])
    torch.testing.assert_close(model(ids), trained.latest_model()(ids), rtol=0, atol=0)
    assert model.cfg == trained.cfg and model.cfg.n_ctx == 32


def test_a_new_thread_keeps_the_process_thread_count(trained):
    seen = []
    t = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
    t.start()
    t.join()
    assert seen == [jobs._PROCESS_THREADS]


def test_caps_cancellation_and_the_busy_message(monkeypatch):
    monkeypatch.setenv("VIZ_MAX_TRAININGS", "1")
    registry = Registry()
    job = registry.start("session-a", TEXT, LONG)
    with pytest.raises(TrainingRefused, match="already running in this session"):
        registry.start("session-a", TEXT, LONG)
    with pytest.raises(ServerBusy, match=r"^the server is busy \(1 training running\); try again in a minute$"):
        registry.start("session-b", TEXT, LONG)
    wait_for_step(job, 5)
    asked = time.monotonic()
    job.cancel()
    assert job.wait(5) and time.monotonic() - asked < 5
    p = job.progress()
    assert p.status == "cancelled" and 5 <= p.step < 3000 and p.snapshot_steps[-1] == p.step
    model = job.latest_model()
    assert torch.isfinite(model(torch.tensor([job.tokenizer.encode("Once upon a time").ids]))).all()
    assert registry.running() == 0
    registry.start("session-b", TEXT, LONG).cancel()  # the slot is free again


def test_the_wall_time_limit_stops_a_job_with_a_model():
    job = TrainJob(TEXT, LONG, max_seconds=1.0).start()
    assert job.wait(15)
    p = job.progress()
    assert p.status == "timed out" and 1 <= p.step < 3000 and p.elapsed < 10
    assert job.latest_model() is not None and p.snapshot_steps[-1] == p.step


def test_the_size_limit_refuses_before_allocating(monkeypatch):
    def no_model(*args, **kwargs):
        raise AssertionError("a model was allocated")

    monkeypatch.setattr(live, "VizTransformer", no_model)
    monkeypatch.setattr(live, "train_bpe", no_model)
    big = TrainSettings(n_layers=4, n_heads=8, d_model=256, n_ctx=256, vocab_size=4096)
    with pytest.raises(TrainingRefused, match=r"MB to train .* above this server's 1,024 MB \(VIZ_MAX_TRAIN_MB\)"):
        TrainJob(TEXT, big)
    monkeypatch.setenv("VIZ_MAX_TRAIN_MB", "1")
    with pytest.raises(TrainingRefused, match="above this server's 1 MB"):
        Registry(max_jobs=5).start("s", TEXT, TrainSettings())


@pytest.mark.parametrize("text, settings, message", [
    ("   \n", TINY, "the text is empty"),
    ("word " * 30, TINY, r"too short \(149 characters\)"),
    (TEXT, TrainSettings(d_model=100, n_heads=8), r"d_model \(100\) must be a multiple of the number of heads \(8\)"),
    (TEXT, TrainSettings(n_layers=9), "n_layers must be between 1 and 4"),
])
def test_bad_input_is_one_line(text, settings, message):
    with pytest.raises(TrainingRefused, match=message):
        TrainJob(text, settings)


def test_a_text_too_short_for_the_context_fails_with_one_line():
    job = TrainJob(TEXT[:400], TrainSettings(n_ctx=256, vocab_size=300)).start()
    assert job.wait(10)
    p = job.progress()
    assert p.status == "failed" and p.error.startswith("the text is too short for a context of 256 tokens")
    assert "\n" not in p.error and job.latest_model() is None


# ---- the page --------------------------------------------------------------------------------------------------

def open_train_page(**widgets) -> AppTest:
    at = open_page("pages/train.py")
    at.slider(key="train_layers").set_value(1)
    at.selectbox(key="train_heads").set_value(2)
    at.selectbox(key="train_width").set_value(32)
    at.selectbox(key="train_ctx").set_value(32)
    at.selectbox(key="train_vocab").set_value(300)
    for key, value in widgets.items():
        at.select_slider(key=key).set_value(value)
    return at.run()


def test_the_page_trains_shows_the_jobs_numbers_and_adopts_the_model():
    at = open_train_page(train_steps=20)
    at.button(key="train_start").click().run()
    job = at.session_state["_train_job"]
    assert job.wait(60)
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    p = job.progress()
    loss = figure_titled(at, "Loss while training")["data"]
    np.testing.assert_array_equal(plotly_array(loss[0]["y"]), np.array(p.losses))
    np.testing.assert_array_equal(plotly_array(loss[1]["y"]), np.array(p.valid_losses))
    # the probe's attention is the trained model's own pattern (run here, independently of the page)
    probe = at.text_input(key="train_probe").value
    model = job.latest_model()
    _, cache = model.run_with_cache(torch.tensor([job.tokenizer.encode(probe).ids]))
    shown = plotly_array(figure_titled(at, "Layer 0, head 0, step 20")["data"][0]["z"])
    np.testing.assert_allclose(shown, cache["blocks.0.attn.hook_pattern"][0, 0].numpy(), atol=1e-6)
    name = at.selectbox(key="model").value
    assert name.startswith("trained: shipped stories") and "Trained for 20 steps" in at.success[0].value
    at.switch_page("pages/tokens.py").run()  # the trained model is this session's model on the other pages
    assert at.selectbox(key="model").value == name and not at.exception
    at.switch_page("pages/train.py").run()
    at.button(key="train_open_timeline").click().run()  # the snapshots open as a timeline on page 6
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key="timeline").value == name
    curves = {t["name"]: t for t in figure_titled(at, "Loss")["data"] if t.get("name", "").endswith("loss")}
    timeline = job.timeline()
    np.testing.assert_allclose(plotly_array(curves["validation loss"]["y"]), timeline["valid_loss"], atol=1e-5)
    np.testing.assert_allclose(plotly_array(curves["train loss"]["y"]), timeline["train_loss"], atol=1e-5)


def test_the_page_refuses_with_one_line_and_cancels(monkeypatch):
    monkeypatch.setenv("VIZ_MAX_TRAININGS", "1")
    other = live.REGISTRY.start("another session", TEXT, LONG)
    try:
        at = open_train_page(train_steps=3000)
        at.button(key="train_start").click().run()
        assert at.warning[0].value.startswith("Not started: the server is busy \\(1 training running\\)")
    finally:
        other.cancel()
        other.wait(5)
    at.radio(key="train_source").set_value("paste").run()
    at.button(key="train_start").click().run()
    assert "the text is empty" in at.error[0].value
    at.radio(key="train_source").set_value("shipped").run()
    at.button(key="train_start").click().run()
    job = at.session_state["_train_job"]
    wait_for_step(job, 3)
    at.button(key="train_cancel").click().run()
    assert not job.running and job.progress().status == "cancelled"
    assert "(cancelled)" in at.success[0].value and at.selectbox(key="model").value.startswith("trained:")
