import subprocess
import sys

IO_MODULES = ("nats", "redis", "asyncio", "subprocess", "litestar", "uvicorn", "httpx", "socket")


def test_domain_imports_no_io_library():
    code = (
        "import sys, pkgutil, importlib, treadle.domain as d\n"
        "for m in pkgutil.iter_modules(d.__path__): importlib.import_module('treadle.domain.' + m.name)\n"
        f"print(','.join(sorted(n for n in {IO_MODULES!r} if n in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"the pure domain pulled in I/O modules: {out}"
