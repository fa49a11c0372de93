"""What the test suites share: waiting (``helpers.wait_for``), the tests' API helper over the SDK (``api``),
scripts for the scripted provider, rollback and provider-over-HTTP helpers. Imported as ``tests.support.…``."""
