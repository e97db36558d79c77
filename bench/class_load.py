"""A class at once: N browser sessions (Playwright contexts in Debian's Chromium) on one server, as when a teacher
shares the link. Most sessions type their own sentence at the same moment; some type a long text (20,000
characters), some upload a checkpoint (the shipped dates-iso model), some upload a hostile one (a 512-head model
with a 20,000-token context, no positional table, a tokenizer whose regex panics, and Markdown in its file name)
and then type the text that makes it panic and a 20,000-character one, and some upload junk bytes. Checks that no
session sees an exception or another session's text, that the hostile uploads end in one-line messages, and
reports median / 95th-percentile latency per kind of session and the server's peak memory.

    .venv/bin/python bench/class_load.py [--sessions 30]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from common import ROOT, save_results, show
from server import CHROMIUM_ARGS, app_server, peak_rss_mb

from viz_model import Config, VizTransformer, load_model, save_checkpoint  # noqa: E402  (common sets the path)

TOKENIZER = load_model()[1]
N_CTX = load_model()[0].cfg.n_ctx

NAMES = ["Ada", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lea", "Max", "Nia", "Oli",
         "Pia", "Quin", "Rosa", "Sam", "Tom", "Uma", "Vic", "Wes", "Xia", "Yan", "Zoe", "Abe", "Bea", "Cy", "Dot"]
STORY = (ROOT / "tests" / "data" / "stories.txt").read_text(encoding="utf-8")
LONG_TEXT = (STORY * (1 + 20_000 // len(STORY)))[:20_000]  # the text box's limit
PANIC_TEXT = "a" * 40  # makes the hostile tokenizer's regex give up: a Rust panic
HOSTILE_NAME = "evil ![x](x.png) **bold**.safetensors"  # Markdown in a file name must show literally
# session i's role: i % 10 -> role (the rest type a short sentence)
ROLES = {1: "long text", 6: "long text", 3: "upload", 5: "hostile upload", 8: "junk upload"}
ERRORS = "[data-testid=stAlertContentError]"
TIMEOUT = 300_000  # ms: 30 browsers on the same 2 cores


def hostile_files(folder: Path) -> dict[str, Path]:
    """The files the upload sessions send: the shipped dates-iso model, a hostile model, junk bytes."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    tok = Tokenizer(models.WordLevel({"a": 0, "b": 1, "<unk>": 2}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("(a+)+b"), "isolated")
    cfg = Config(n_layers=1, n_heads=512, d_head=4, d_model=64, d_mlp=64, d_vocab=16, n_ctx=20_000, positional="none")
    hostile = save_checkpoint(VizTransformer(cfg), tok, folder / HOSTILE_NAME)
    junk = folder / "junk.safetensors"
    junk.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json" + bytes(range(256)) * 64)
    return {"upload": ROOT / "assets" / "models" / "dates-iso.safetensors", "hostile upload": hostile,
            "junk upload": junk}


async def _type(page, text: str) -> None:
    box = page.get_by_label("Text", exact=True)
    await box.fill(text)
    await box.press("Control+Enter")


async def _chips(page, text: str) -> bool:
    """Wait for every token chip of ``text`` (up to the default model's context) with its id, in place."""
    ids = TOKENIZER.encode(text).ids[:N_CTX]
    try:
        for k in (range(len(ids)) if len(ids) < 40 else (0, len(ids) // 2, len(ids) - 1)):
            await page.locator(f'.tok[title="position {k}, id {ids[k]}"]').first.wait_for(timeout=TIMEOUT)
    except Exception:
        return False
    return True


async def _upload(page, path: Path, expect: str) -> bool:
    try:  # 30 browsers on 2 cores: the page may take longer than Playwright's default 30 s to draw the uploader
        await page.locator("input[type=file]").first.set_input_files(str(path), timeout=TIMEOUT)
        await page.get_by_text(expect).first.wait_for(timeout=TIMEOUT)
    except Exception:
        return False
    return True


async def student(browser, url: str, i: int, start: asyncio.Event, results: list, files: dict) -> None:
    role = ROLES.get(i % 10, "short text")
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    page = await context.new_page()
    try:
        await page.goto(url + ("/tokens" if role.endswith("text") else "/inspector"), timeout=TIMEOUT)
        await page.get_by_label("Text", exact=True).wait_for(timeout=TIMEOUT)
    except Exception as exc:  # the page never opened: counted, and the other sessions go on
        await start.wait()
        results.append({"session": i, "role": role, "ms": float("nan"), "ok": False, "other tokens seen": [],
                        "exceptions": await page.locator("[data-testid=stException]").count(),
                        "unexpected errors": 0, "opened": False, "why": str(exc).splitlines()[0]})
        await context.close()
        return
    await start.wait()
    t0 = time.perf_counter()
    expected_errors, others, ok = 0, [], True
    if role.endswith("text"):
        text = LONG_TEXT if role == "long text" else f"{NAMES[i % len(NAMES)]} {i} saw a big red ball in the park."
        await _type(page, text)
        ok = await _chips(page, text)
        ids = TOKENIZER.encode(text).ids[:N_CTX]
        titles = await page.locator(".tok").evaluate_all("els => els.map(e => e.title)")
        others = [] if titles == [f"position {k}, id {t}" for k, t in enumerate(ids)] else titles[:3]
    elif role == "upload":
        ok = await _upload(page, files[role], "It is now the selected model")
    elif role == "junk upload":
        ok = await _upload(page, files[role], "The previous model is still selected")
        expected_errors = 1
    else:  # hostile: loads; the panic becomes a message; a long text is cut to the memory budget; no outside image
        ok = await _upload(page, files[role], "It is now the selected model")
        await _type(page, PANIC_TEXT)
        try:
            await page.get_by_text("The text cannot be run").first.wait_for(timeout=TIMEOUT)
            await _type(page, ("ab " * 7000)[:20_000])
            await page.get_by_text("only the first").first.wait_for(timeout=TIMEOUT)
            await page.locator(ERRORS).first.wait_for(state="detached", timeout=TIMEOUT)
        except Exception:
            ok = False
        ok = ok and await page.locator('img[src*="x.png"]').count() == 0
    elapsed = (time.perf_counter() - t0) * 1000
    exceptions = await page.locator("[data-testid=stException]").count()
    errors = await page.locator(ERRORS).count()
    results.append({"session": i, "role": role, "ms": elapsed, "ok": ok, "other tokens seen": others,
                    "exceptions": exceptions, "unexpected errors": max(0, errors - expected_errors)})
    await context.close()


async def run(n: int, cold: bool = False) -> None:
    from playwright.async_api import async_playwright
    with tempfile.TemporaryDirectory() as tmp, app_server() as (url, proc):
        files = hostile_files(Path(tmp))
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            if not cold:  # the teacher opens the app first: the server imports its modules in one session
                page = await browser.new_page()
                for path in ("/tokens", "/inspector"):
                    await page.goto(url + path, timeout=TIMEOUT)
                    await page.get_by_label("Text", exact=True).wait_for(timeout=TIMEOUT)
                await page.close()
            start, results = asyncio.Event(), []
            tasks = [asyncio.create_task(student(browser, url, i, start, results, files)) for i in range(n)]
            await asyncio.sleep(0)
            while sum(1 for t in tasks if not t.done()) and len(results) == 0 and not start.is_set():
                await asyncio.sleep(2)
                start.set()  # everyone acts at (nearly) the same moment once the pages are open
            await asyncio.gather(*tasks)
            await browser.close()
        peak = peak_rss_mb(proc.pid)
    rows = []
    for role in ["short text", "long text", "upload", "hostile upload", "junk upload", "all"]:
        mine = [r for r in results if role in ("all", r["role"])]
        if not mine:
            continue
        ms = sorted(r["ms"] for r in mine if r.get("opened", True)) or [float("nan")]
        rows.append({"sessions": role, "n": len(mine), "median ms": statistics.median(ms),
                     "p95 ms": ms[max(0, int(0.95 * len(ms)) - 1)],
                     "page never opened": sum(not r.get("opened", True) for r in mine),
                     "not done": sum(not r["ok"] for r in mine), "another's text": sum(bool(r["other tokens seen"])
                                                                                     for r in mine),
                     "exceptions": sum(r["exceptions"] for r in mine),
                     "unexpected errors": sum(r["unexpected errors"] for r in mine),
                     "server peak RSS MB": peak})
    show(f"{n} sessions at once", rows,
         "Latency: from the action (Ctrl+Enter, or choosing the file) to its expected result on the page: own tokens "
         "shown; 'It is now the selected model'; the junk's one-line error; for the hostile model the panic's message, "
         "then the 20,000-character text cut to the memory budget with no error left. 'not done': that result never "
         "came. 'exceptions' must be 0: every failure is a message.")
    for r in results:
        if not r["ok"] or r["other tokens seen"] or r["exceptions"] or r["unexpected errors"]:
            print("problem:", r)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sessions", type=int, default=30)
    p.add_argument("--cold", action="store_true", help="no first visit: every session's page is the server's first "
                   "(concurrent first imports of different pages have failed with ImportError)")
    args = p.parse_args()
    asyncio.run(run(args.sessions, args.cold))
    save_results()


if __name__ == "__main__":
    main()
