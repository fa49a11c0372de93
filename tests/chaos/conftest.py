"""The chaos tests reuse the e2e deployment fixtures (a whole stack of real processes) and its HTTP driver.

Everything of the e2e conftest is re-exported: pytest imports every conftest as module ``conftest`` and the last
one loaded (this one, since tests/chaos comes after tests/e2e) is what ``from conftest import …`` finds, in the
e2e modules too."""

import importlib.util
import sys
from pathlib import Path

_E2E = Path(__file__).resolve().parent.parent / "e2e"
sys.path.insert(0, str(_E2E))  # for `api`, the e2e HTTP driver the fixtures use
_spec = importlib.util.spec_from_file_location("e2e_fixtures", _E2E / "conftest.py")
_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fixtures)

globals().update({name: value for name, value in vars(_fixtures).items() if not name.startswith("__")})
