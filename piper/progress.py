"""Progress bars for management commands."""

from __future__ import annotations


class _PlainBar:
    """A progress line for when tqdm is not installed."""

    def __init__(self, total: int, name: str, out) -> None:
        self.total, self.name, self.out, self.done = total, name, out, 0

    def update(self, n: int) -> None:
        self.done += n
        self.out.write(f"\r{self.name}: {self.done}/{self.total}", ending="")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.out.write("")


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


def progress_bar(total: int, name: str, *, disabled: bool, out, unit: str = "row"):
    """A progress bar for a management command (tqdm when installed) on `out`, the
    command's stdout or stderr; `disabled` (e.g. --no-progress, for logs) shows none."""
    if disabled:
        return _NoBar()
    try:
        from tqdm import tqdm
    except ImportError:
        return _PlainBar(total, name, out)
    return tqdm(total=total, desc=name, unit=unit, file=out._out, dynamic_ncols=True)
