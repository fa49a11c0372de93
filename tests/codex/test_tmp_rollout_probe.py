import os
import shutil
from pathlib import Path


def snap(root):
    return {p.name[-60:]: p.stat().st_size for p in sorted(Path(root).rglob("rollout-*.jsonl"))}


async def test_probe(open_driver, mock):
    driver = await open_driver()
    await driver.play("turn one")
    await driver.play("turn two")
    adapter = driver.adapter
    root = Path(adapter._home_root())
    thread = adapter._thread_id
    await adapter.rollback(1)
    await driver.play("turn three")
    await driver.play("turn four")
    await adapter.rollback(1)
    await driver.play("turn five")
    await adapter.close()
    print("AFTER-2-ROLLBACKS", snap(root))
    home = root / "acme"
    keep = {p: p.read_bytes() for p in home.rglob("rollout-*.jsonl")}
    for child in list(home.iterdir()):
        if child.name != "config.toml":
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    for i, (p, data) in enumerate(sorted(keep.items(), key=lambda kv: kv[0].name, reverse=True)):
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        os.utime(p, (1_000_000 + i * 1000, 1_000_000 + i * 1000))  # the newest by name gets the oldest mtime
    d3 = await open_driver(native_ref=thread)
    await d3.play("resumed")
    body = str(mock.requests[-1].body["input"])
    print("FRESH", {t: t in body for t in ("turn one", "turn two", "turn three", "turn four", "turn five")})
    print("AFTER-FRESH", snap(root))
    await d3.adapter.close()
