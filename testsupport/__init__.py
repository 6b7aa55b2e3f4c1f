"""Test support, outside the ``piper`` runtime package: the pytest plugin that
starts real Celery workers, celery beat and throwaway Redis servers
(``testsupport.plugin``, loaded by the root ``conftest.py``)."""
