"""Run a skill's code in a bubblewrap sandbox (DESIGN.md §6, issue #5).

``run_skill`` starts a fresh sandbox per call: no network, a throwaway working
directory, read-only system directories, none of the service's environment or
files, CPU/memory/process/file-size/output/wall-clock limits, and only the
declared tools, reached over a JSON-lines channel. See docs/sandbox.md.
"""

from skills.sandbox.runner import OUTCOMES, Limits, SandboxResult, run_skill
from skills.sandbox.runtime import SandboxUnavailable

__all__ = ["OUTCOMES", "Limits", "SandboxResult", "SandboxUnavailable", "run_skill"]
