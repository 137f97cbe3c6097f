"""`lazy.module`: imported on the first attribute read, and only then (issue 25: a hub append
read the ledger module's attributes through `importlib.import_module` three times)."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import pytest

from mempalace_logstream import lazy


def test_imported_once_on_first_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)
    imports: list[str] = []
    real = importlib.import_module

    def counting(name: str, package: str | None = None) -> Any:
        imports.append(name)
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", counting)
    deferred = lazy.module("colorsys")
    assert "colorsys" not in sys.modules
    assert deferred.rgb_to_hsv(1.0, 0.0, 0.0) == (0.0, 1.0, 1.0)
    assert deferred.hsv_to_rgb(0.0, 1.0, 1.0) == (1.0, 0.0, 0.0)
    assert imports == ["colorsys"]
    assert "colorsys" in sys.modules
    with pytest.raises(AttributeError):
        _ = deferred.no_such_name
