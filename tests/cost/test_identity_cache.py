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


def test_pair_made_once_per_pair_of_owners():
    memo, made = IdentityCache(8), []
    a, b, c = Record(), Record(), Record()
    make = lambda x, y: made.append((x, y)) or (x, y)  # noqa: E731
    assert memo.read_pair((id(a), id(b)), a, b, make, a, b) == (a, b)
    assert memo.read_pair((id(a), id(b)), a, b, make, a, b)[1] is b and len(made) == 1
    # either owner of another identity under the same key (a reused id) is made again
    assert memo.read_pair((id(a), id(b)), a, c, make, a, c)[1] is c and len(made) == 2
    assert memo.read_pair((id(a), id(b)), c, c, make, c, c)[0] is c and len(made) == 3
    hit = memo.entries[id(a), id(b)]
    assert hit[0] is c and hit[1] is c  # the entry holds both owners alive
    memo.clear()
    assert not memo.entries


def test_get_and_put_as_read_split_in_two():
    memo = IdentityCache(2)
    a, b = Record(), Record()
    assert memo.get(id(a), a) is None
    memo.put(id(a), a, "kept")
    assert memo.get(id(a), a) == "kept" and memo.get(id(a), b) is None  # another owner, same id
    assert memo.read(id(a), a, lambda: "made") == "kept"  # read finds what put kept
    memo.put(id(b), b, 1)
    memo.put(1, a, 2)  # full: cleared whole
    assert list(memo.entries) == [1]
