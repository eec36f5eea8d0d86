"""cost/published/trust_table.json holds what the published rows give now (cost/trust_table.py):
the residuals, distance levels, memory fills and MFU records every plan reads are the ones the
rows, ran.yaml and crossval.yaml derive, float for float, and a stale table fails naming the
command that writes it again."""

from __future__ import annotations

from paraplan.cost import trust, trust_table


def test_the_stored_table_is_what_the_rows_give_now():
    assert not trust_table.stale(), (f"{trust.TRUST_TABLE} is stale (a published row, ran.yaml,"
                                     f" crossval.yaml or how they are read changed): run"
                                     f" `{trust_table.COMMAND}`")


def test_a_plan_reads_exactly_the_derived_numbers():
    # objects, not text: every float read back from the JSON equals the derived one exactly (a
    # plan's printed band is then byte for byte the derivation's), and each row's distance
    # level and fitted die are pool_facts' of the published pool, judged afresh here
    res = trust.published_residuals()
    assert res == trust_table.derive_residuals()
    assert len(res) == 239  # the bundled rows (tests/validation/test_crossval.py)
    assert trust._pool_facts(res) == trust.pool_facts(res)
    for _, _, band in trust.SCALE_BANDS:
        assert trust.published_memory_fractions(band) == trust_table.derive_memory_fractions().get(band, ())
    assert trust.mfu_records() == trust_table.derive_mfu_records()


def test_another_pool_is_judged_afresh():
    # a pool without one family (a published row's own band, for coverage) is not the table's:
    # its levels are judged within it, so a row can sit nearer the others than in the full pool
    res = trust.published_residuals()
    pool = tuple(r for r in res if r.features.family != "mosaicml")
    assert trust._pool_facts(pool) == trust.pool_facts(pool)
    assert trust._pool_facts(pool)[0] != {k: v for k, v in trust.pool_facts(res)[0].items()
                                          if k in {r.id for r in pool}}


def test_a_stale_table_fails_the_check_with_the_command(tmp_path, monkeypatch, capsys):
    stored = tmp_path / "trust_table.json"
    stored.write_text(trust.TRUST_TABLE.read_text().replace('"mfu_records"', '"mfu_records" '))
    monkeypatch.setattr(trust_table, "TRUST_TABLE", stored)
    assert trust_table.main(["--check"]) == 1
    assert trust_table.COMMAND in capsys.readouterr().err
    assert trust_table.main([]) == 0 and trust_table.main(["--check"]) == 0
