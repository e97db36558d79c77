"""Write the benchmarks' current figures into bench/README.md, from the result files they save (bench/results/*.json,
written by ``common.save_results``): nothing in those tables is typed by hand.

    .venv/bin/python bench/report.py            # rewrite the tables in bench/README.md
    .venv/bin/python bench/report.py --check    # exit 1 when bench/README.md does not show the result files

bench/README.md marks where each benchmark's figures go:

    <!-- results: NAME -->
    (generated: the tables of results/NAME.json and of its variants, results/NAME-*.json)
    <!-- /results -->

A marker whose benchmark has no result file says "not yet run" and how to run it. A table of more than
``FOLD_ROWS`` rows (every round, every message) is folded into a ``<details>`` block.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
README = BENCH / "README.md"
RESULTS = BENCH / "results"
FOLD_ROWS = 12
MARKER = re.compile(r"(<!-- results: ([\w-]+) -->\n)(.*?)(<!-- /results -->)", re.S)
MARKER_NAMES = re.compile(r"<!-- results: ([\w-]+) -->")


def cell(value: object) -> str:
    """A table cell: numbers with thousands separators and a precision that fits their size, empty for null/NaN,
    text on one line with ``|`` escaped."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        size = abs(value)
        return f"{value:,.0f}" if size >= 1000 else f"{value:,.1f}" if size >= 100 else f"{value:,.2f}" \
            if size >= 0.01 or value == 0 else f"{value:.2g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(columns: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(cell(c) for c in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def render_run(result: dict) -> str:
    """One result file: where and how it was measured, then its tables in the order the script printed them."""
    m = result.get("machine", {})
    load = m.get("load_average") or [math.nan, math.nan]
    memory = f"{m['memory_gb']:g}" if isinstance(m.get("memory_gb"), (int, float)) else "?"
    parts = []
    if result.get("variant"):
        parts.append(f"**Variant `{result['variant']}`**")
    parts.append(f"`{result.get('command', '?')}` at commit `{result.get('commit', '?')}`, {result.get('date', '?')}; "
                 f"{m.get('cpus', '?')} × {m.get('cpu', '?')}, {memory} GB, Python "
                 f"{m.get('python', '?')}, torch {m.get('torch') or '–'}; 1-minute load average {cell(load[0])} at the "
                 f"start, {cell(load[1])} at the end.")
    for table in result.get("tables", []):
        body = markdown_table(table["columns"], table["rows"])
        if len(table["rows"]) > FOLD_ROWS:
            body = f"<details><summary>{len(table['rows'])} rows</summary>\n\n{body}\n\n</details>"
        parts.append(f"*{cell(table['title'])}*\n\n{body}")
        if table.get("note"):
            parts.append(" ".join(table["note"].split()))
    return "\n\n".join(parts)


def result_files(name: str) -> list[Path]:
    """``results/NAME.json`` first, then its variants ``results/NAME-*.json`` by name."""
    base = RESULTS / f"{name}.json"
    return ([base] if base.exists() else []) + sorted(RESULTS.glob(f"{name}-*.json"))


def render(name: str) -> str:
    files = result_files(name)
    if not files:
        return (f"*Not yet run.* Run `.venv/bin/python bench/{name}.py` (options above), then "
                "`.venv/bin/python bench/report.py`.\n")
    return "\n\n".join(render_run(json.loads(f.read_text(encoding="utf-8"))) for f in files) + "\n"


def rewrite(text: str) -> str:
    return MARKER.sub(lambda m: m.group(1) + "\n" + render(m.group(2)) + "\n" + m.group(4), text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="only check that bench/README.md is up to date")
    args = p.parse_args(argv)
    text = README.read_text(encoding="utf-8")
    new = rewrite(text)
    named = set(MARKER_NAMES.findall(text))
    orphans = sorted(f.name for f in RESULTS.glob("*.json")
                     if not any(f.stem == n or f.stem.startswith(n + "-") for n in named))
    if orphans:
        print(f"result files without a marker in bench/README.md: {', '.join(orphans)}", file=sys.stderr)
    if args.check:
        if new != text:
            print("bench/README.md is out of date: run `python bench/report.py`", file=sys.stderr)
            return 1
        return 0
    if new != text:
        README.write_text(new, encoding="utf-8")
        print("bench/README.md rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
