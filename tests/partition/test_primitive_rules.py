"""PrimePar's P(q x q) index rules (ASPLOS'24 Eqs. 4-6, Table 1), checked on a numpy simulation.

Each GPU (r, c) only ever multiplies blocks it holds; blocks move between steps only as
Table 1 says (ring neighbours). We check, for q = 2, 4, 8:
- every phase gives the exact product (Y = I W, dI = dY W^T, dW = I^T dY);
- at every step no block of any tensor is held by two GPUs (no replication);
- the phases chain: stashed I, W and dO blocks are the ones the next phase starts with.

Finding on the Gradient rule (Eq. 6): taken alone, the last step (delta = 1) computes a
*different* dW block, (N=r+c, K=c), than the q-1 steps before it, (N=r+c-1, K=c-1), so the
per-GPU sums of Eq. 6 are NOT dW blocks. The rule is exact only together with Table 1's
last-step transfer: GPU (r, c) receives the partial dW that GPU (r, c+1) accumulated over
the first q-1 steps (its block is exactly (r+c, c)) and adds its own last product. The test
`test_gradient_without_last_transfer_is_not_exact` pins that down.
"""

import numpy as np
import pytest


def _blocks(x, q):
    rs, cs = x.shape[0] // q, x.shape[1] // q
    return {(a, b): x[a * rs:(a + 1) * rs, b * cs:(b + 1) * cs] for a in range(q) for b in range(q)}


def _assemble(blocks, q):
    return np.block([[blocks[(a, b)] for b in range(q)] for a in range(q)])


def _distinct(held):
    """No block index is held by two GPUs."""
    return len(set(held.values())) == len(held)


def _run(q, seed=0, with_last_transfer=True):
    rng = np.random.default_rng(seed)
    M, N, K = 2 * q, 3 * q, 4 * q  # M tokens (batch folded in), N in, K out
    I, W, dY = rng.normal(size=(M, N)), rng.normal(size=(N, K)), rng.normal(size=(M, K))
    Ib, Wb, dYb = _blocks(I, q), _blocks(W, q), _blocks(dY, q)
    gpus = [(r, c) for r in range(q) for c in range(q)]

    # ---- Forward (Eq. 4): O[r,c] += I[r, r+c+t] W[r+c+t, c]; I from (r,c+1), W from (r+1,c)
    i_at = {(r, c): (r, (r + c) % q) for r, c in gpus}  # stored skewed layout at t = 0
    w_at = {(r, c): ((r + c) % q, c) for r, c in gpus}
    O = {g: 0.0 for g in gpus}
    for t in range(q):
        assert _distinct(i_at) and _distinct(w_at)
        for r, c in gpus:
            assert i_at[(r, c)] == (r, (r + c + t) % q) and w_at[(r, c)] == ((r + c + t) % q, c)
            O[(r, c)] = O[(r, c)] + Ib[i_at[(r, c)]] @ Wb[w_at[(r, c)]]
        if t < q - 1:
            i_at = {(r, c): i_at[(r, (c + 1) % q)] for r, c in gpus}
            w_at = {(r, c): w_at[((r + 1) % q, c)] for r, c in gpus}
    fwd_ok = np.allclose(_assemble(O, q), I @ W)
    stash_i, w_end = dict(i_at), dict(w_at)

    # ---- Backward (Eq. 5): dI[r, r+c-1] += dY[r, c+t] W[r+c-1, c+t]
    dy_at = {(r, c): (r, c) for r, c in gpus}  # dY arrives in the output's layout
    assert all(w_end[(r, c)] == ((r + c - 1) % q, c) for r, c in gpus)  # chains from forward
    w_at = dict(w_end)
    dI = {g: 0.0 for g in gpus}
    for t in range(q):
        assert _distinct(dy_at) and _distinct(w_at)
        for r, c in gpus:
            assert dy_at[(r, c)] == (r, (c + t) % q) and w_at[(r, c)] == ((r + c - 1) % q, (c + t) % q)
            dI[(r, c)] = dI[(r, c)] + dYb[dy_at[(r, c)]] @ Wb[w_at[(r, c)]].T
        if t < q - 1:
            dy_at = {(r, c): dy_at[(r, (c + 1) % q)] for r, c in gpus}
            w_at = {(r, c): w_at[((r - 1) % q, (c + 1) % q)] for r, c in gpus}
        else:  # realign W for the next forward: from (r, c+1)
            w_at = {(r, c): w_at[(r, (c + 1) % q)] for r, c in gpus}
    assert w_at == {(r, c): ((r + c) % q, c) for r, c in gpus}
    dI_blocks = {(r, (r + c - 1) % q): dI[(r, c)] for r, c in gpus}
    bwd_ok = len(dI_blocks) == q * q and np.allclose(_assemble(dI_blocks, q), dY @ W.T)

    # ---- Gradient (Eq. 6): M = r+t, N = r+c-1+d, K = c-1+d, d = 1 on the last step
    i_at = dict(stash_i)  # the stashed block is where the gradient phase starts
    dy_at = {(r, c): dy_at[(r, c)] for r, c in gpus}
    assert all(i_at[(r, c)] == (r, (r + c - 1) % q) for r, c in gpus)
    assert all(dy_at[(r, c)] == (r, (c - 1) % q) for r, c in gpus)
    acc = {g: 0.0 for g in gpus}
    dW = {}
    for t in range(q):
        d = 1 if t == q - 1 else 0
        assert _distinct(i_at) and _distinct(dy_at)
        for r, c in gpus:
            assert i_at[(r, c)] == ((r + t) % q, (r + c - 1 + d) % q)
            assert dy_at[(r, c)] == ((r + t) % q, (c - 1 + d) % q)
        prods = {g: Ib[i_at[g]].T @ dYb[dy_at[g]] for g in gpus}
        if t < q - 1:
            acc = {g: acc[g] + prods[g] for g in gpus}
            nxt = (lambda r, c: ((r + 1) % q, (c - 1) % q)) if t < q - 2 else (lambda r, c: ((r + 1) % q, c))
            nxt_dy = (lambda r, c: ((r + 1) % q, c)) if t < q - 2 else (lambda r, c: ((r + 1) % q, (c + 1) % q))
            i_at = {(r, c): i_at[nxt(r, c)] for r, c in gpus}
            dy_at = {(r, c): dy_at[nxt_dy(r, c)] for r, c in gpus}
        else:
            for r, c in gpus:
                partial = acc[(r, (c + 1) % q)] if with_last_transfer else acc[(r, c)]
                dW[(r, c)] = partial + prods[(r, c)]
    # GPU (r, c) ends with dW[(r+c), c]: the forward W layout, so the optimizer needs no move
    dW_blocks = {((r + c) % q, c): dW[(r, c)] for r, c in gpus}
    grad_ok = len(dW_blocks) == q * q and np.allclose(_assemble(dW_blocks, q), I.T @ dY)
    return fwd_ok, bwd_ok, grad_ok


@pytest.mark.parametrize("q", [2, 4, 8])
def test_all_three_phases_are_exact(q):
    assert _run(q) == (True, True, True)


@pytest.mark.parametrize("q", [2, 4])
def test_gradient_without_last_transfer_is_not_exact(q):
    fwd_ok, bwd_ok, grad_ok = _run(q, with_last_transfer=False)
    assert fwd_ok and bwd_ok and not grad_ok


def test_shift_volumes_match_the_cost_model():
    """Per-GPU blocks received per phase (Table 1) = the step lists of cost.partition."""
    from partition_support import instance_and_site

    from paraplan.cost.comm import NetEfficiency
    from paraplan.cost.partition import LayerContext, OpPartition, linear_op_cost
    inst, o, site = instance_and_site(tp=4)
    ctx = LayerContext(inst, o, site, NetEfficiency())
    c = linear_op_cost(ctx, "attn_out", OpPartition("P", 1, 2))
    T, h = ctx.tokens, inst.model.hidden
    # q = 2: blocks of [T/2, h/2] (I, O) and [h/2, h/2] (W); largest step: forward I + W,
    # backward O + W, gradient I + O; the fp32 dW block (4 bytes) is h*h bytes
    blk_io, blk_w = 2 * T * h / 4, 2 * h * h / 4
    assert c.buffer_bytes == max(blk_io + blk_w, 2 * blk_io, 4 * h * h / 4)
