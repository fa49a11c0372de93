"""The embedded stack's partition count follows the machine (issue 38); a deployment's broker keeps the default."""

from __future__ import annotations

from treadle.runtime.partitions import DEFAULT_PARTITIONS, for_machine


def test_one_partition_per_core_up_to_the_deployment_default():
    assert [for_machine(cpus=c) for c in (1, 2, 4, 8, 64)] == [1, 2, 4, 8, DEFAULT_PARTITIONS]


def test_replicas_hold_as_many_partitions_each():
    assert for_machine(replicas=2, cpus=2) == 2
    assert for_machine(replicas=3, cpus=2) == 3
    assert for_machine(replicas=3, cpus=4) == 6
    assert for_machine(replicas=2, cpus=1) == 2


def test_an_unknown_core_count_is_one_core():
    assert for_machine(cpus=0) == 1
