"""The chaos tests run on the e2e deployment: its fixtures (a whole stack of real processes, tenants and their
API clients) are the e2e conftest's."""

from tests.e2e.conftest import api, log, stack, stack_nc, tenant  # noqa: F401  (fixtures)
