"""Debian's headless Chromium driven by selenium, as the page's tests and the screenshot script use it: nothing
downloaded, no profile but a fresh one, downloads into a folder given, the console kept for reading."""

from __future__ import annotations

import importlib.util
import tempfile
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")


def missing() -> str | None:
    """Why the browser cannot run here, or None."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not path.exists():
            return f"{path} is not installed (apt-get install chromium chromium-driver)"
    if importlib.util.find_spec("selenium") is None:
        return "selenium is not installed (pip install -e '.[test]')"
    return None


def chrome(downloads: Path, width: int = 1000, height: int = 800):
    """A headless Chromium whose console (goog:loggingPrefs) and downloads the caller reads; quit() it."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                     "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
                     "--disable-dev-shm-usage", f"--window-size={width},{height}",
                     f"--user-data-dir={tempfile.mkdtemp(prefix='chromium-')}"):
        options.add_argument(argument)
    options.add_experimental_option("prefs", {"download.default_directory": str(downloads),
                                              "download.prompt_for_download": False})
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    return driver


def color_scheme(driver, scheme: str) -> None:
    """Emulate prefers-color-scheme: "light" or "dark"."""
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia",
                           {"features": [{"name": "prefers-color-scheme", "value": scheme}]})
