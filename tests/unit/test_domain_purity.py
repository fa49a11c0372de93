import subprocess
import sys

IO_MODULES = ("nats", "redis", "asyncio", "subprocess", "litestar", "uvicorn", "httpx", "socket")


def test_core_imports_no_io_library():
    code = (
        "import sys, pkgutil, importlib, treadle.core as c\n"
        "for m in pkgutil.walk_packages(c.__path__, 'treadle.core.'): importlib.import_module(m.name)\n"
        f"print(','.join(sorted(n for n in {IO_MODULES!r} if n in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"the pure core pulled in I/O modules: {out}"
