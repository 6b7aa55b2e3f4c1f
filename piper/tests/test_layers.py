"""The apps depend downward only (DESIGN §2) and the services packages have
no loops: the import-linter contracts in pyproject.toml hold, and they are not
vacuous (the same layers upside down break)."""

import os
import tomllib
from pathlib import Path

import pytest
from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[2]


def _lint(config: Path) -> int:
    here = os.getcwd()
    os.chdir(ROOT)  # the root packages are found from the project's directory
    try:
        return lint_imports(config_filename=str(config), no_cache=True, no_logo=True)
    finally:
        os.chdir(here)


def test_no_app_imports_an_app_above_it():
    assert _lint(ROOT / "pyproject.toml") == 0


CONTRACTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]


@pytest.mark.parametrize("contract", CONTRACTS["contracts"], ids=lambda c: c["name"])
def test_the_contract_sees_the_imports_it_checks(tmp_path, contract):
    upside_down = tmp_path / "upside_down.ini"
    upside_down.write_text(
        "[importlinter]\nroot_packages =\n"
        + "".join(f"    {p}\n" for p in CONTRACTS["root_packages"])
        + "\n[importlinter:contract:upside_down]\nname = upside down\ntype = layers\n"
        + "exhaustive = false\nignore_imports =\n"
        + "".join(f"    {i}\n" for i in contract.get("ignore_imports", []))
        + "".join(f"containers =\n    {c}\n" for c in contract.get("containers", []))
        + "layers =\n"
        + "".join(f"    {' '.join(layer.split())}\n" for layer in reversed(contract["layers"]))
    )
    assert _lint(upside_down) == 1
