"""Screenshots of the web page for README, light and dark, of the text and files views: a real `--no-ray` server
with the demo model and the same headless Chromium the page's tests drive, so they can be remade whenever the
page changes.

    python -m loadtests.screenshots --out deploy/screenshots
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from .browser import chrome, color_scheme, missing
from .server import served

SUBTITLES = "1\n00:00:01,000 --> 00:00:03,000\nforty-two\n\n2\n00:00:04,000 --> 00:00:06,000\nseven hundred\n"


def wait_for(condition, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the page did not get there")
        time.sleep(0.05)


def text_view(driver, url: str, _: Path) -> None:
    driver.get(url + "/?target=fr&alternatives=2&q=nine+hundred+and+ninety-nine+thousand")
    wait_for(lambda: driver.find_element("id", "alternatives-list").is_displayed())


def files_view(driver, url: str, upload: Path) -> None:
    driver.get(url + "/?view=files&target=de")
    wait_for(lambda: driver.find_element("id", "target").get_attribute("value") == "de")
    driver.find_element("id", "file").send_keys(str(upload))
    driver.find_element("id", "translate-file").click()
    wait_for(lambda: driver.find_element("id", "download").is_displayed())


VIEWS = {"text": text_view, "files": files_view}
WIDTH = 1000


def whole_page(driver) -> bytes:
    """A PNG of the page at WIDTH CSS pixels, as tall as its content."""
    bottom = "return Math.ceil(document.querySelector('main').getBoundingClientRect().bottom)"
    height = driver.execute_script(bottom)
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": WIDTH, "height": height, "deviceScaleFactor": 1, "mobile": False})
    try:
        return driver.get_screenshot_as_png()
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("deploy/screenshots"))
    parser.add_argument("--host", default="http://127.0.0.1:8031")
    args = parser.parse_args()
    if missing():
        raise SystemExit(missing())
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        upload = work / "talk.srt"
        upload.write_text(SUBTITLES, encoding="utf-8")
        with served(args.host, f"--no-ray --key-store {work / 'keys.sqlite'}", log=work / "server.log"):
            driver = chrome(work, width=WIDTH)
            try:
                for scheme in ("light", "dark"):
                    color_scheme(driver, scheme)
                    for name, show in VIEWS.items():
                        show(driver, args.host, upload)
                        path = args.out / f"page-{name}-{scheme}.png"
                        path.write_bytes(whole_page(driver))
                        print(path)
            finally:
                driver.quit()


if __name__ == "__main__":
    main()
