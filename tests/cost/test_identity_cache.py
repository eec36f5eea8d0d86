"""cost/identity_cache.IdentityCache: a value is made once per (key, owner), an equal owner of
another identity is made again, and a full memo is cleared whole (one slot with max_entries=1)."""

from paraplan.cost.identity_cache import IdentityCache


class Record:  # equal to any other Record: the memo must tell them apart by identity alone
    def __eq__(self, other):
        return isinstance(other, Record)

    def __hash__(self):
        return 0


def test_made_once_per_owner_and_again_for_an_equal_other():
    memo, made = IdentityCache(8), []
    a, b = Record(), Record()
    make = lambda r, n: made.append(n) or (r, n)  # noqa: E731
    assert memo.read((id(a), 1), a, make, a, 1) == (a, 1)
    assert memo.read((id(a), 1), a, make, a, 1)[0] is a and made == [1]
    assert memo.read((id(a), 2), a, make, a, 2) == (a, 2) and made == [1, 2]
    # an owner whose key names another's id (as a reused id would) is not served that one's value
    assert memo.read((id(a), 1), b, make, b, 1)[0] is b and made == [1, 2, 1]
    assert memo.entries[id(a), 1][0] is b  # the entry holds its owner alive


def test_full_memo_cleared_whole_and_one_slot():
    memo, made = IdentityCache(2), []
    owners = [Record() for _ in range(3)]
    for r in owners:
        memo.read(id(r), r, made.append, id(r))
    assert len(memo.entries) == 1 and id(owners[2]) in memo.entries  # cleared at the third
    one = IdentityCache(1)
    for r in owners + owners[-1:]:
        one.read(id(r), r, made.append, id(r))
    assert len(made) == 6 and list(one.entries) == [id(owners[2])]  # the last asked served again
