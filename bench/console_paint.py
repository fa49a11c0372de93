"""The console's first paint on the embedded stack, in Debian's Chromium (Playwright): the browser's own
``first-contentful-paint`` entry for the sign-in page (cold cache), the thread list and a thread with a completed
run (signed in, warm cache), and the bytes of every console asset.

    .venv/bin/python bench/console_paint.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from pathlib import Path

import nats
from playwright.async_api import async_playwright

from treadle.cli.stack import Stack
from treadle.client import TreadleClient
from treadle.gateway.console import STATIC
from treadle.ops.tokens import TokenStore

FCP = "() => (performance.getEntriesByName('first-contentful-paint')[0] || {}).startTime"


async def fcp(browser, url: str, token: str | None, wait: str) -> tuple[float, float]:
    context = await browser.new_context(viewport={"width": 1280, "height": 860})
    page = await context.new_page()
    if token:
        await page.goto(url.split("#")[0])
        await page.fill("input[name=token]", token)
        await page.click("button[type=submit]")
        await page.wait_for_selector("table.threads")
    await page.goto(url)
    if token:
        await page.reload()  # a fresh document on this URL: the paint entry is its own
    await page.wait_for_selector(wait)
    shown = await page.evaluate("() => performance.now()")  # an upper bound: includes Playwright's polling
    value = await page.evaluate(FCP)
    await context.close()
    return float(value), float(shown)


async def main(repeat: int) -> None:
    size = {p.name: p.stat().st_size for p in sorted(STATIC.iterdir())}
    print("assets:", ", ".join(f"{k} {v} B" for k, v in size.items()), f"= {sum(size.values())} B uncompressed")
    with tempfile.TemporaryDirectory() as tmp:
        async with Stack(Path(tmp)) as stack:
            nc = await nats.connect(stack.nats_url)
            token = await TokenStore(nc.jetstream()).create("bench", "alice")
            await nc.close()
            async with TreadleClient(stack.api_url, token) as client:
                thread = (await client.create_thread(title="paint"))["thread_id"]
                sent = await client.send(thread, "hello", script={"steps": [{"type": "text", "text": "hi"}]})
                await client.wait_run(sent["run_id"], timeout=30)
            base = stack.api_url.rstrip("/")
            async with async_playwright() as p:
                browser = await p.chromium.launch(
                    executable_path="/usr/bin/chromium", headless=True, args=["--no-sandbox"]
                )
                for name, url, tok, wait in (
                    ("sign-in page", base + "/", None, "input[name=token]"),
                    ("thread list", base + "/", token, "table.threads tr[data-thread]"),
                    ("thread page", f"{base}/#/t/{thread}", token, ".run[data-status=completed]"),
                ):
                    values = [await fcp(browser, url, tok, wait) for _ in range(repeat)]
                    paint, shown = [v[0] for v in values], [v[1] for v in values]
                    print(
                        f"{name:>13}: first-contentful-paint median {statistics.median(paint):.0f} ms "
                        f"(max {max(paint):.0f}), content shown by {statistics.median(shown):.0f} ms "
                        f"(max {max(shown):.0f}) over {repeat} loads"
                    )
                await browser.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.repeat))
