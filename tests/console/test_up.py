"""`treadle up --demo` (what `make run` runs) prints the console's URL, and the demo thread is there once signed
in with the printed dev token."""

from __future__ import annotations

import re

from playwright.async_api import expect

from tests.console.conftest import ConsolePage
from tests.support.provider_http import TreadleUp


async def test_treadle_up_prints_the_console_url_and_the_demo_thread_is_in_it(browser, tmp_path):
    up = TreadleUp(tmp_path / "state", {}, demo=True)
    await up.start()
    try:
        printed = up.log.read_text()
        found = re.search(r"console\s+(http://127\.0\.0\.1:\d+/#/t/(thr_[0-9a-z]{26}))", printed)
        assert found, printed[-2000:]
        url, thread = found.groups()
        context = await browser.new_context(viewport={"width": 1280, "height": 860})
        try:
            page = await context.new_page()
            console = ConsolePage(page, up.api_url, tmp_path)
            await page.goto(url)
            await page.fill("input[name=token]", up.token)
            await page.click("button[type=submit]")
            await expect(page.locator(".thread h1")).to_have_text("Treadle demo")
            await expect(page.locator(".run").first).to_have_attribute("data-status", "completed")
            await console.shot("demo-thread")
            await page.goto(up.api_url + "/")
            await expect(page.locator(f"tr[data-thread={thread}]")).to_contain_text("Treadle demo")
            await console.shot("demo-list")
            assert console.errors == []
        finally:
            await context.close()
    finally:
        assert await up.stop() == 0
