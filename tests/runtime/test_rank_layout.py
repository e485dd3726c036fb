"""Device ownership across MPI ranks (no MPI needed): contiguous blocks within a node or of whole
nodes, and a clear refusal naming both sizes otherwise."""

from __future__ import annotations

import pytest

from flexrt.errors import MachineSpecError
from flexrt.machine import load_machine
from flexrt.runtime.mpi import rank_layout


@pytest.mark.parametrize("nodes, ranks", [(1, 1), (1, 2), (1, 4), (2, 2), (2, 4), (4, 2), (4, 16)])
def test_every_device_owned_once_in_equal_contiguous_blocks(nodes, ranks):
    m = load_machine("flexflow_p100", nodes)  # 4 devices per node
    owned = [rank_layout(m, ranks, r).devices() for r in range(ranks)]
    assert sorted(d for ds in owned for d in ds) == list(range(m.num_devices))
    k = m.num_devices // ranks
    for r, ds in enumerate(owned):
        assert ds == list(range(r * k, (r + 1) * k))
        nodes_of = {m.devices[d].node for d in ds}
        assert len(nodes_of) == 1 or len(ds) == len(nodes_of) * m.devices_per_node


@pytest.mark.parametrize("nodes, ranks", [(1, 3), (2, 3), (2, 16), (3, 2)])
def test_worlds_that_do_not_fit_are_refused_naming_both_sizes(nodes, ranks):
    m = load_machine("flexflow_p100", nodes)
    with pytest.raises(MachineSpecError, match=rf"{ranks} MPI ranks do not fit machine .*\({nodes} node\(s\) x 4 "
                                               rf"devices = {4 * nodes} devices.*valid world sizes: 1, "):
        rank_layout(m, ranks, 0)
