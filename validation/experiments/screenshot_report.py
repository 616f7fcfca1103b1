"""Screenshot a gpumodel HTML report in headless chromium (Playwright driving the system browser).

    python validation/experiments/screenshot_report.py                 # docs/img/report.png
    python validation/experiments/screenshot_report.py page.html out.png [--full]

With no page given it writes the plan report of the README's training question
(`gpumodel plan train --model llama-2-7b --tokens 1T --gpu h100 --days 30 --html ...`) to a
temporary folder and shoots that. Needs `pip install playwright` and Debian's `chromium`
(`apt-get install chromium`); Playwright's own browser download is not used.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLAN = ["plan", "train", "--model", "llama-2-7b", "--tokens", "1T", "--gpu", "h100", "--days",
        "30"]  # fmt: skip


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        sys.exit("no chromium on PATH: apt-get install -y chromium")
    return path


def shoot(page_path: Path, png: Path, full: bool, width: int = 1200, height: int = 900) -> None:
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": width, "height": height},
                                device_scale_factor=1)  # fmt: skip
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(page_path.resolve().as_uri())
        png.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(png), full_page=full)
        browser.close()
    if errors:
        sys.exit(f"the page logged errors: {errors}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("page", nargs="?", help="HTML report (default: the README's training plan)")
    ap.add_argument("png", nargs="?", default=str(ROOT / "docs" / "img" / "report.png"))
    ap.add_argument("--full", action="store_true", help="the whole page, not the first screen")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(args.page) if args.page else Path(tmp) / "plan.html"
        if not args.page:
            subprocess.run([sys.executable, "-m", "gpumodel", *PLAN, "--html", str(page)],
                           cwd=ROOT, check=True, stdout=subprocess.DEVNULL)  # fmt: skip
        shoot(page, Path(args.png), args.full)
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
