"""bench/README.md shows the benchmarks' saved results (bench/results/*.json) as bench/report.py writes them: no figure
there is typed by hand, and a benchmark without results says so."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"


def load_report():
    spec = importlib.util.spec_from_file_location("bench_report", BENCH / "report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_readme_is_what_report_writes_from_the_result_files():
    out = subprocess.run([sys.executable, str(BENCH / "report.py"), "--check"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "without a marker" not in out.stderr, out.stderr  # every result file has its place in the README


def test_every_benchmark_script_has_a_place_in_the_readme():
    report = load_report()
    named = set(report.MARKER_NAMES.findall(report.README.read_text(encoding="utf-8")))
    helpers = {"common", "server", "st_client", "deployment", "report"}
    scripts = {p.stem for p in BENCH.glob("*.py")} - helpers
    assert scripts == named


def test_a_result_file_becomes_its_tables_and_a_missing_one_says_not_yet_run(tmp_path, monkeypatch):
    report = load_report()
    monkeypatch.setattr(report, "RESULTS", tmp_path)
    record = {"benchmark": "capture", "variant": "", "commit": "abc1234", "date": "2026-01-02 03:04 UTC",
              "command": "python bench/capture.py --rounds 2",
              "machine": {"cpu": "CPU X", "cpus": 4, "memory_gb": 16.0, "python": "3.11.7", "torch": "2.13.0",
                          "load_average": [0.5, 1.25]},
              "tables": [{"title": "Capture | overhead", "columns": ["model", "tokens", "ms", "ratio", "note"],
                          "rows": [["tinystories-6l", 1024, 1234.5678, 1.0149, None],
                                   ["gpt2", 32, 0.004, float("nan"), "a|b"]],
                          "note": "Targets: ≤ 1.15.\nSecond line."}]}
    (tmp_path / "capture.json").write_text(json.dumps(record))
    (tmp_path / "capture-gpu.json").write_text(json.dumps({**record, "variant": "gpu", "tables": []}))
    text = "<!-- results: capture -->\nold\n<!-- /results -->\n<!-- results: latency -->\n<!-- /results -->\n"
    new = report.rewrite(text)
    assert "old" not in new
    assert "`python bench/capture.py --rounds 2` at commit `abc1234`, 2026-01-02 03:04 UTC; 4 × CPU X" in new
    assert "load average 0.50 at the start, 1.25 at the end" in new
    assert "*Capture \\| overhead*" in new
    assert "| model | tokens | ms | ratio | note |\n|---|---|---|---|---|" in new
    assert "| tinystories-6l | 1,024 | 1,235 | 1.01 |  |" in new
    assert "| gpt2 | 32 | 0.004 |  | a\\|b |" in new
    assert "Targets: ≤ 1.15. Second line." in new
    assert new.index("`abc1234`") < new.index("**Variant `gpu`**")  # the base file first, then its variants
    latency = new[new.index("<!-- results: latency -->"):]
    assert "*Not yet run.* Run `.venv/bin/python bench/latency.py`" in latency
    assert report.rewrite(new) == new  # rewriting is stable
