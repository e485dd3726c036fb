"""flexrt.keras reads FlexFlow's flags from ``sys.argv`` when a model compiles (``FFConfig()``, as
FlexFlow does); under pytest that is pytest's own command line, so every test here runs with an
empty one unless it sets its own."""

import sys

import pytest


@pytest.fixture(autouse=True)
def plain_argv(monkeypatch):
    monkeypatch.setattr(sys, "argv", [sys.argv[0]])
