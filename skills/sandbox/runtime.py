"""What the sandbox is made of: the bubblewrap command line and the Python it runs.

The skill's interpreter is the service's own base Python (the venv's
``sys.base_prefix``), standard library only. It is served from a mirror —
hard links to the interpreter, ``libpython`` and the standard library, without
``site-packages`` or the test suite — built once under
``/var/cache/piper-sandbox`` (``~/.cache/piper-sandbox`` when not root). The
mirror exists because bubblewrap runs as an unprivileged user (see
``SANDBOX_UID``), which may not be able to traverse to the real install (pyenv
puts it under ``/root``, mode 700), and so that the sandbox sees no
third-party packages.

Why an unprivileged uid: ``RLIMIT_NPROC`` is never enforced for processes
whose real uid is host root, and bubblewrap run by root maps the sandbox user
onto host root. Run by uid 65534 through ``setpriv``, bubblewrap creates a user
namespace of its own per sandbox, where the process count is kept per
namespace — so each sandbox gets its own process budget and a fork bomb in one
does not starve the others.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

SANDBOX_UID = 65534  # "nobody": bubblewrap's own uid when the service runs as root
WORKDIR = "/skill"
INSTALL_HINT = (
    "install bubblewrap: `apt-get install -y bubblewrap` on Debian/Ubuntu (`make install` does it)"
)
# Parts of the standard library a skill never needs; the rest is mirrored.
_SKIP = {"site-packages", "dist-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip"}


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot create a sandbox on this machine."""


def _python_paths() -> tuple[Path, Path, Path, Path | None]:
    """(prefix, interpreter, stdlib dir, libpython or None when linked statically)."""
    prefix = Path(sys.base_prefix)
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    interpreter = prefix / "bin" / f"python{version}"
    if not interpreter.exists():
        interpreter = Path(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))
    stdlib = Path(sysconfig.get_path("stdlib", vars={"installed_base": str(prefix)}))
    libpython = None
    if sysconfig.get_config_var("Py_ENABLE_SHARED"):
        name = sysconfig.get_config_var("INSTSONAME") or sysconfig.get_config_var("LDLIBRARY")
        candidate = Path(sysconfig.get_config_var("LIBDIR") or prefix / "lib") / name
        if candidate.exists():
            libpython = candidate
    return prefix, interpreter, stdlib, libpython


def _cache_root() -> Path:
    if os.geteuid() == 0:
        return Path("/var/cache/piper-sandbox")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "piper-sandbox"


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


@functools.cache
def python_runtime() -> tuple[Path, Path, str]:
    """(mirror directory, its mount point in the sandbox, interpreter path in the sandbox)."""
    prefix, interpreter, stdlib, libpython = _python_paths()
    if str(prefix) in ("/usr", "/"):
        # A distribution Python: /usr is mounted anyway and -I -S keeps its
        # site-packages off sys.path.
        return prefix, prefix, str(interpreter)
    stat = interpreter.stat()
    key = hashlib.sha256(
        f"{sys.version}|{prefix}|{interpreter}|{stat.st_ino}|{stat.st_mtime_ns}".encode()
    ).hexdigest()[:16]
    root = _cache_root()
    mirror = root / f"python{sys.version_info.major}.{sys.version_info.minor}-{key}"
    inside = str(prefix / interpreter.relative_to(prefix))
    if (mirror / ".complete").exists():
        return mirror, prefix, inside

    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)
    staging = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
    os.chmod(staging, 0o755)
    parts = [interpreter] + ([libpython] if libpython else [])
    for part in parts:
        target = staging / part.relative_to(prefix)
        target.parent.mkdir(parents=True, exist_ok=True)
        _link_or_copy(part, target)
    for directory, subdirs, files in os.walk(stdlib):
        subdirs[:] = [d for d in subdirs if d not in _SKIP]
        relative = Path(directory).relative_to(prefix)
        (staging / relative).mkdir(parents=True, exist_ok=True)
        for name in files:
            _link_or_copy(Path(directory) / name, staging / relative / name)
    for directory, subdirs, _ in os.walk(staging):
        for name in subdirs:
            os.chmod(os.path.join(directory, name), 0o755)
    (staging / ".complete").touch()
    try:
        staging.rename(mirror)
    except OSError:  # another process finished first
        shutil.rmtree(staging, ignore_errors=True)
    return mirror, prefix, inside


@functools.cache
def _tools() -> tuple[str, str | None]:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxUnavailable(f"bubblewrap (bwrap) is not on PATH; {INSTALL_HINT}")
    setpriv = None
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            raise SandboxUnavailable("setpriv (util-linux) is needed to run bwrap as root")
    return bwrap, setpriv


def command(
    *,
    read_fd: int,
    write_fd: int,
    info_fd: int,
    limits_argv: list[str],
    tmpfs_bytes: int,
    bootstrap: str,
) -> list[str]:
    """The argv that starts one sandbox running ``bootstrap``."""
    bwrap, setpriv = _tools()
    mirror, mount_point, interpreter = python_runtime()
    argv = []
    if setpriv:
        uid = str(SANDBOX_UID)
        argv += [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]
    argv += [
        bwrap,
        "--unshare-all",  # user, pid, net (no interfaces), ipc, uts, cgroup
        "--unshare-user",
        "--disable-userns",
        "--die-with-parent",
        "--as-pid-1",  # no reaper: bwrap would leave it a zombie for the host's init
        "--new-session",
        "--hostname",
        "sandbox",
        "--info-fd",  # tells the host the skill's pid, so a kill leaves no zombie
        str(info_fd),
        "--clearenv",
        "--setenv", "PATH", "/usr/bin:/bin",
        "--setenv", "HOME", WORKDIR,
        "--setenv", "TMPDIR", WORKDIR,
        "--setenv", "LANG", "C.UTF-8",
        "--setenv", "TZ", "UTC",
        # glibc reserves 64 MB of address space per thread arena; with RLIMIT_AS
        # that would make a few threads look like a memory hog.
        "--setenv", "MALLOC_ARENA_MAX", "2",
        "--ro-bind", "/usr", "/usr",
    ]  # fmt: skip
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/") / name
        if path.is_symlink():
            argv += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            argv += ["--ro-bind", str(path), str(path)]
    argv += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    if mirror != mount_point:
        argv += ["--ro-bind", str(mirror), str(mount_point)]
    argv += [
        "--proc", "/proc",
        "--dev", "/dev",
        "--size", str(tmpfs_bytes), "--perms", "0700", "--tmpfs", WORKDIR,
        "--chdir", WORKDIR,
        "--remount-ro", "/dev",
        "--remount-ro", "/",
        interpreter, "-I", "-S", "-B", "-c", bootstrap,
        str(read_fd), str(write_fd), *limits_argv,
    ]  # fmt: skip
    return argv
