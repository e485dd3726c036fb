"""The walk the delta-equals-full tests share: random single-operator changes of a strategy."""

from __future__ import annotations

import random

from flexrt.strategy import is_compute, random_config


def random_changes(base, machine, strategy, seed: int, steps: int):
    """``steps`` times: one compute operator of ``base`` (drawn with ``random.Random(seed)``) gets a
    random configuration; yields (the strategy so far, the changed operator's name)."""
    rng = random.Random(seed)
    ops = [n for n in base.nodes if is_compute(n)]
    for _ in range(steps):
        node = rng.choice(ops)
        strategy = strategy.with_config(node.id, random_config(base, node, machine, rng))
        yield strategy, node.name
