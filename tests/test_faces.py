"""The old module addresses still import, and name the very objects of the modules' new homes."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize(
    ("face", "home"),
    [
        ("crawler.router", "crawler.frontier.router"),
        ("crawler.consumer", "crawler.worker.consumer"),
        ("crawler.exchanges", "crawler.frontier.exchanges"),
    ],
)
def test_an_old_address_re_exports_its_new_home(face: str, home: str) -> None:
    old, new = importlib.import_module(face), importlib.import_module(home)
    assert old.__doc__ and home in old.__doc__
    assert old.__all__
    for name in old.__all__:
        assert getattr(old, name) is getattr(new, name)
