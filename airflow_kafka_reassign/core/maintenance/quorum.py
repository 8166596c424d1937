"""The KRaft controller quorum guard: a decommission must not take away a controller voter unnoticed.

In KRaft the metadata log is replicated by the controller VOTERS (DescribeQuorum); the cluster stays
available while a majority of them runs. A node with ``process.roles=broker,controller`` (a combined
node, as the sandbox's nodes 1..3) is a voter too: draining and stopping it as a "broker" removes a
voter. :func:`check_voters` refuses that before anything is sent, naming the voter(s), the number of
voters and the majority, and how to proceed; never, even when allowed, when the voters left would be
fewer than the majority (the cluster would stop accepting metadata changes).

Pure: imports no Airflow, no Kafka client, no PySpark.
"""

from __future__ import annotations

from collections.abc import Collection

from airflow_kafka_reassign.core.vocabulary.models import _Frozen
from airflow_kafka_reassign.core.vocabulary.ports import QuorumInfo
from airflow_kafka_reassign.exceptions import GuardRefusedError


class VoterRemovalRefusedError(GuardRefusedError):
    """A decommission would take away KRaft controller voter(s)."""


class VoterCheck(_Frozen):
    """What :func:`check_voters` found: the ``voters`` among the brokers to decommission, the quorum's size
    and majority, and how many voters would be left."""

    voters: tuple[int, ...]
    quorum_voters: tuple[int, ...]
    majority: int
    voters_left: int

    @property
    def ok(self) -> bool:
        return not self.voters


def majority_of(voters: int) -> int:
    """Raft's majority of ``voters``."""
    return voters // 2 + 1


def voter_check(brokers: Collection[int], quorum: QuorumInfo, *, also_down: Collection[int] = ()) -> VoterCheck:
    """Which of ``brokers`` are voters of ``quorum``; ``also_down``: voters already not running (they count
    against the majority too)."""
    quorum_voters = quorum.voter_ids
    hit = tuple(sorted(set(brokers) & set(quorum_voters)))
    gone = set(hit) | (set(also_down) & set(quorum_voters))
    return VoterCheck(voters=hit, quorum_voters=quorum_voters, majority=majority_of(len(quorum_voters)),
                      voters_left=len(quorum_voters) - len(gone))


def check_voters(
    brokers: Collection[int],
    quorum: QuorumInfo,
    *,
    allow_voter_removal: bool = False,
    also_down: Collection[int] = (),
) -> VoterCheck:
    """Refuse (:class:`VoterRemovalRefusedError`, before anything is sent) to decommission brokers that are
    KRaft controller voters, unless ``allow_voter_removal``; even then refuse when the voters left would be
    fewer than the majority. Returns what it found."""
    found = voter_check(brokers, quorum, also_down=also_down)
    if found.ok:
        return found
    ids = ", ".join(map(str, found.voters))
    n = len(found.quorum_voters)
    state = (f"the metadata quorum has {n} voter(s) ({', '.join(map(str, found.quorum_voters))}) and needs "
             f"{found.majority} of them running; without {ids} {found.voters_left} would be left")
    static = all(v.directory_id is None for v in quorum.voters if v.id in found.voters)
    how = ("first move the controller role to another node: add a new controller and remove this one from the "
           "quorum (kafka-metadata-quorum --bootstrap-controller HOST:PORT add-controller on the new node, then "
           "remove-controller --controller-id <id> --controller-directory-id <its directory id>; KIP-853, a "
           "dynamic quorum, Kafka 3.9+)")
    if static:
        how += ("; these voters have no directory id, so the quorum is static (controller.quorum.voters): it "
                "cannot be changed online, migrate it to a dynamic quorum (kraft.version 1) first")
    if found.voters_left < found.majority:
        raise VoterRemovalRefusedError(
            f"refused to decommission broker(s) {ids}: they are KRaft controller voters (a combined broker+"
            f"controller node counts), and {state}, fewer than the majority: the cluster would stop accepting "
            f"metadata changes. Nothing was sent; allow_voter_removal cannot allow this. To proceed, {how}.")
    if not allow_voter_removal:
        raise VoterRemovalRefusedError(
            f"refused to decommission broker(s) {ids}: they are KRaft controller voters (a combined broker+"
            f"controller node counts), and {state}: one more failure would then stop the cluster. Nothing was "
            f"sent. To proceed, {how}; or pass allow_voter_removal=True to decommission them as voters anyway "
            "(the quorum keeps them as voters, and they count as failed while they are stopped).")
    return found
