"""A report's first screen as a PNG, as a reader sees it: headless Chromium (Debian's, driven
by Playwright from the dev tools) at 1400 × 900, once its charts have drawn.

    .venv/bin/python tools/screenshot_report.py /tmp/h200/report/index.html \\
        examples/h200-2026-12-01-kernels/run14-15/report.png

Each committed example keeps its report's first screen beside it as report.png, made so.
"""

import argparse
import shutil
import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

#: The first screen the report is laid out for (tests/report/test_claims.py checks it).
VIEWPORT = {"width": 1400, "height": 900}
#: Chromium as root, offline: no sandbox, no background network (which this kind of machine
#: refuses), a fresh profile.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update",
         "--disable-sync"]  # fmt: skip


def argument_problem(report: Path, png: Path) -> str | None:
    """What makes the arguments no report and no PNG (checked before Chromium starts): a
    report that is missing or is no HTML file (a Markdown file would be pictured as it is),
    a picture path that is a folder or not a .png (Playwright picks the format by it)."""
    if not report.is_file():
        inside = report / "index.html"
        hint = f" (the report is {inside})" if inside.is_file() else ""
        return f"no report {report}{hint}"
    if report.suffix.lower() not in (".html", ".htm"):
        return f"{report} is not a rendered report (an .html file such as report/index.html)"
    if png.is_dir():
        return f"{png} is a folder: give the PNG file to write (e.g. {png / 'report.png'})"
    if png.suffix.lower() != ".png":
        return f"{png}: the picture is written as PNG: give a path ending in .png"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("report", type=Path, help="a rendered report (index.html)")
    parser.add_argument("png", type=Path, help="the PNG to write")
    args = parser.parse_args()
    problem = argument_problem(args.report, args.png)
    if problem:
        print(f"screenshot_report: {problem}", file=sys.stderr)
        return 2
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("screenshot_report: no Chromium on this machine (Debian: apt-get install chromium)",
              file=sys.stderr)  # fmt: skip
        return 2
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=FLAGS)
        try:
            page = browser.new_page(viewport=VIEWPORT)
            page.goto(args.report.resolve().as_uri())
            # Every chart drawn (or said why not) before the picture is taken.
            page.wait_for_function("[...document.querySelectorAll('div.chart')].every("
                                   "d => d.querySelector('svg, canvas') || d.textContent)",
                                   timeout=60_000)  # fmt: skip
            page.screenshot(path=str(args.png))
        finally:
            browser.close()
    print(args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
