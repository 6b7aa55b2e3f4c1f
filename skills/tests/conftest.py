from skills.tests.helpers import in_process_sandbox  # noqa: F401  (a fixture)
