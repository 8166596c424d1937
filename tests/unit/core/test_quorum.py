"""core/maintenance/quorum.py: a decommission of a KRaft controller voter is refused before anything is sent."""

from __future__ import annotations

import pytest

from airflow_kafka_reassign.core.maintenance.quorum import VoterRemovalRefusedError, check_voters, majority_of
from airflow_kafka_reassign.core.vocabulary.ports import QuorumInfo, QuorumMember
from airflow_kafka_reassign.testing import FakeClusterAdmin


def quorum(voters=(1, 2, 3), observers=(4, 5), directory_ids=False) -> QuorumInfo:
    return QuorumInfo(leader=voters[0], voters=tuple(QuorumMember(id=v, directory_id=f"d{v}" if directory_ids else None)
                                                     for v in voters),
                      observers=tuple(QuorumMember(id=o) for o in observers))


def test_majority():
    assert [majority_of(n) for n in (1, 2, 3, 4, 5)] == [1, 2, 2, 3, 3]


def test_brokers_that_are_not_voters_pass():
    assert check_voters([4, 5], quorum()).ok


def test_a_combined_node_is_a_voter_and_is_refused_with_the_numbers_and_the_way_forward():
    with pytest.raises(VoterRemovalRefusedError) as e:
        check_voters([2, 4], quorum())
    text = str(e.value)
    assert "broker(s) 2:" in text and "3 voter(s) (1, 2, 3)" in text and "needs 2 of them" in text
    assert "2 would be left" in text and "remove-controller" in text and "allow_voter_removal=True" in text
    assert "static (controller.quorum.voters)" in text  # the sandbox's quorum has no directory ids
    assert "Nothing was sent" in text


def test_allowed_removal_passes_while_a_majority_is_left():
    found = check_voters([3], quorum(directory_ids=True), allow_voter_removal=True)
    assert found.voters == (3,) and found.voters_left == 2 and found.majority == 2


def test_losing_the_majority_is_refused_even_when_allowed():
    with pytest.raises(VoterRemovalRefusedError, match=r"fewer than the majority.*cannot allow this"):
        check_voters([2, 3], quorum(), allow_voter_removal=True)
    with pytest.raises(VoterRemovalRefusedError, match="fewer than the majority"):
        check_voters([3], quorum(), allow_voter_removal=True, also_down=[1])  # voter 1 is already down


def test_on_the_fakes_quorum():
    f = FakeClusterAdmin.build({1: None, 2: None, 3: None, 4: None}, {"t": [[1, 2]]})
    q = f.describe_quorum()
    assert q.voter_ids == (1, 2, 3) and q.observer_ids == (4,) and q.leader == 1
    assert check_voters([4], q).ok
    with pytest.raises(VoterRemovalRefusedError):
        check_voters([1], q)
