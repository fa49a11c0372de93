"""The chaos tests reuse the e2e deployment fixtures (a whole stack of real processes) and its HTTP driver."""

import importlib.util
import sys
from pathlib import Path

_E2E = Path(__file__).resolve().parent.parent / "e2e"
sys.path.insert(0, str(_E2E))  # for `api`, the e2e HTTP driver the fixtures use
_spec = importlib.util.spec_from_file_location("e2e_fixtures", _E2E / "conftest.py")
_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fixtures)

api, log, stack, stack_nc, tenant = _fixtures.api, _fixtures.log, _fixtures.stack, _fixtures.stack_nc, _fixtures.tenant
make_api = _fixtures.make_api
