"""The suite's results as a Markdown table and a PNG chart, saved beside their JSON.

``python -m benchmarks.report [benchmarks/out/results.json]`` renders a saved run again
(Markdown to stdout, ``results.md`` and ``results.png`` beside the JSON file). What it
writes is in :mod:`benchmarks.results`, :mod:`benchmarks.report_markdown` and
:mod:`benchmarks.report_chart`.
"""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.report_chart import chart
from benchmarks.report_markdown import full_markdown
from benchmarks.results import Results


def save(r: Results, out_dir: Path) -> tuple[Path, Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    md = out_dir / "results.md"
    md.write_text(full_markdown(r))
    js = out_dir / "results.json"
    js.write_text(json.dumps(r.to_json(), indent=2, default=str))
    png = out_dir / "results.png"
    chart(r, png)
    return md, js, png


def main(argv: list[str] | None = None) -> None:
    import sys

    args = sys.argv[1:] if argv is None else argv
    source = Path(args[0]) if args else Path(__file__).resolve().parent / "out" / "results.json"
    results = Results.from_json(json.loads(source.read_text()))
    (source.parent / "results.md").write_text(full_markdown(results))
    chart(results, source.parent / "results.png")
    print(full_markdown(results))


if __name__ == "__main__":
    main()
