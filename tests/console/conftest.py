"""One embedded deployment for the console tests (the e2e suite's fixtures) and a real Chromium driven by
Playwright: Debian's /usr/bin/chromium (scripts/ensure-chromium.sh), never a downloaded browser."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import api, log, pytest_runtest_makereport, pytest_runtest_setup, stack, stack_nc, tenant

__all__ = ["api", "log", "pytest_runtest_makereport", "pytest_runtest_setup", "stack", "stack_nc", "tenant"]

# axe-core (vendored, tests only): injected into every page as an init script, which the page's CSP does not govern
AXE = (Path(__file__).parent / "vendor" / "axe.min.js").read_text()
CHROMIUM = os.environ.get("TREADLE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture(scope="session")
async def browser():
    from playwright.async_api import async_playwright

    assert Path(CHROMIUM).exists(), f"no Chromium at {CHROMIUM}: `make setup` installs Debian's chromium"
    async with async_playwright() as p:
        b = await p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield b
        await b.close()


class ConsolePage:
    """A browser page on the console with every console error and failed request collected."""

    def __init__(self, page, base: str, out: Path) -> None:
        self.page, self.base, self.out = page, base, out
        self.errors: list[str] = []
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(str(e)))

    async def sign_in(self, token: str) -> None:
        await self.page.goto(self.base + "/")
        await self.page.fill("input[name=token]", token)
        await self.page.click("button[type=submit]")
        await self.page.wait_for_selector("table.threads")

    async def text_nulls(self) -> list[str]:
        """Lines of the page saying ``null`` (not ``/dev/null``), with their neighbours: a value not in words."""
        lines = (await self.page.evaluate("document.body.innerText")).splitlines()
        return [
            " | ".join(lines[max(0, i - 1) : i + 2])
            for i, line in enumerate(lines)
            if re.search(r"(?<![/\w])null\b", line)
        ]

    async def overflow(self) -> int:
        """How far the page is wider than the window (0: no horizontal scrolling)."""
        return await self.page.evaluate("document.documentElement.scrollWidth - window.innerWidth")

    async def accessibility(self) -> list[str]:
        """The serious and critical accessibility violations axe-core finds on the page as it is now."""
        found = await self.page.evaluate("axe.run(document, { resultTypes: ['violations'] })")
        return [
            f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']][:3]}"
            for v in found["violations"]
            if v["impact"] in ("serious", "critical")
        ]

    async def shot(self, name: str) -> Path:
        path = self.out / f"{name}.png"
        await self.page.screenshot(path=str(path), full_page=True)
        return path


@pytest.fixture
async def console(browser, stack, tmp_path):
    context = await browser.new_context(viewport={"width": 1280, "height": 860})
    await context.add_init_script(AXE)
    page = await context.new_page()
    cp = ConsolePage(page, stack.api_url.rstrip("/"), tmp_path)
    yield cp
    await context.close()


@pytest.fixture
async def console_at(browser, stack, tmp_path):
    """A console page at a given width and colour scheme (each its own browser context)."""
    contexts = []

    async def make(width: int = 1280, height: int = 860, color_scheme: str = "light") -> ConsolePage:
        context = await browser.new_context(viewport={"width": width, "height": height}, color_scheme=color_scheme)
        contexts.append(context)
        await context.add_init_script(AXE)
        return ConsolePage(await context.new_page(), stack.api_url.rstrip("/"), tmp_path)

    yield make
    for context in contexts:
        await context.close()


@pytest.fixture
async def http(stack):
    async with httpx.AsyncClient(base_url=stack.api_url, timeout=10) as client:
        yield client
