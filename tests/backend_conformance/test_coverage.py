"""Every method of the Backend protocol has a conformance test: a file of this suite names
it in ``COVERS`` and calls it. A method added to the protocol fails here until a test of
it is added, which every engine then has to pass."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

from sqljobs.backends.base import Backend

HERE = Path(__file__).parent


def protocol_methods() -> set[str]:
    """The protocol's methods and properties (its plain attributes are data, not calls)."""
    return {
        name
        for name, member in vars(Backend).items()
        if not name.startswith("_") and (inspect.isfunction(member) or isinstance(member, property))
    }


def covered() -> dict[str, set[str]]:
    """Each test module's ``COVERS``, by module name."""
    out = {}
    for info in pkgutil.iter_modules([str(HERE)]):
        if not info.name.startswith("test_") or info.name == "test_coverage":
            continue
        module = importlib.import_module(f"{__package__}.{info.name}")
        out[info.name] = set(getattr(module, "COVERS", set()))
    return out


def test_every_protocol_method_has_a_conformance_test() -> None:
    claimed = set().union(*covered().values())
    missing = sorted(protocol_methods() - claimed)
    assert not missing, f"Backend methods without a conformance test: {missing}"
    assert not claimed - protocol_methods(), "COVERS names only protocol methods"


def test_each_file_calls_what_it_says_it_covers() -> None:
    for module, names in covered().items():
        source = (HERE / f"{module}.py").read_text(encoding="utf-8")
        uncalled = sorted(n for n in names if not re.search(rf"\.{n}\b", source))
        assert not uncalled, f"{module} names {uncalled} in COVERS but never uses them"
