"""The replay buffer: masked add against a reference ring, priorities and importance weights,
frozen segments, and jit/vmap over a batch of buffers."""

from __future__ import annotations

from functools import cache
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ccjax.agents.replay import Replay, can_sample, segments_left, size
from ccjax.errors import ConfigError

EXAMPLE = {"obs": jnp.zeros((2,), jnp.float32), "action": jnp.zeros((), jnp.int32)}


@cache
def jitted(rb: Replay) -> SimpleNamespace:
    """``rb``'s operations jitted (a whole program compiles faster than eager op-by-op dispatch
    runs); the freeze tests keep the eager path."""
    return SimpleNamespace(add=jax.jit(rb.add), sample=jax.jit(rb.sample, static_argnums=2),
                           update_priorities=jax.jit(rb.update_priorities))


def rows(ids) -> dict:
    """A batch whose row with id k is obs (k, -k), action k: a slot's content names its row."""
    ids = np.asarray(ids)
    return {"obs": np.stack([ids, -ids], -1).astype(np.float32), "action": ids.astype(np.int32)}


def stored_ids(state) -> np.ndarray:
    obs, act = np.asarray(state.data["obs"]), np.asarray(state.data["action"])
    np.testing.assert_array_equal(obs[:, 0], act)  # each slot holds one whole row
    np.testing.assert_array_equal(obs[:, 1], -act)
    return act


def ref_ring(seg_size: int, ids) -> tuple[list, int, int]:
    """One segment filled row by row: (slot contents, -1 empty), pointer, fill."""
    slots, ptr = [-1] * seg_size, 0
    for k in ids:
        slots[ptr] = k
        ptr = (ptr + 1) % seg_size
    return slots, ptr, min(len(ids), seg_size)


def test_masked_add_stores_only_masked_rows_in_order():
    rb = Replay(8)
    st, add = rb.init(EXAMPLE), jitted(rb).add
    st = add(st, rows([10, 11, 12, 13, 14, 15]), np.array([1, 0, 1, 1, 0, 0], bool))
    assert stored_ids(st)[:3].tolist() == [10, 12, 13]
    assert int(st.ptr[0]) == 3 and int(st.fill[0]) == 3 and int(size(st)) == 3
    np.testing.assert_array_equal(st.priority, [1, 1, 1, 0, 0, 0, 0, 0])  # new rows: 1 if empty
    # a (T, N) mask in the Trajectory layout: rows are taken time-major
    b = jax.tree.map(lambda x: x.reshape(2, 2, *x.shape[1:]), rows([20, 21, 22, 23]))
    st = add(st, b, np.array([[False, True], [True, False]]))
    assert stored_ids(st)[:5].tolist() == [10, 12, 13, 21, 22] and int(size(st)) == 5
    st2 = add(st, rows([30, 31]), np.zeros(2, bool))  # nothing real: nothing changes
    assert jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.all(a == b)), st, st2))


def test_ring_overwrite_matches_reference():
    rb, rng = Replay(5), np.random.default_rng(0)
    st, added, next_id, add = rb.init(EXAMPLE), [], 0, jitted(rb).add
    for m in (3, 4, 1, 12, 7, 2):  # 12 > capacity: only the last 5 real rows survive
        ids = np.arange(next_id, next_id + 12)
        next_id += 12
        mask = (rng.random(12) < 0.7) & (np.arange(12) < m)  # one shape: one compile
        st = add(st, rows(ids), mask)
        added += ids[mask].tolist()
        slots, ptr, fill = ref_ring(5, added)
        assert stored_ids(st)[:fill].tolist() == slots[:fill]
        assert int(st.ptr[0]) == ptr and int(st.fill[0]) == fill
    assert len(added) > 5  # the buffer wrapped


def test_new_rows_get_max_priority_and_update_priorities():
    rb = Replay(6, alpha=0.6, eps=0.01)
    op = jitted(rb)
    st = op.add(rb.init(EXAMPLE), rows([0, 1, 2]), np.ones(3, bool))
    st = op.update_priorities(st, jnp.array([0, 2, 4]), jnp.array([-3.0, 0.5, 9.0]))
    # |delta| + eps; slot 4 is empty, so its update is ignored and it stays unsampleable
    np.testing.assert_allclose(st.priority, [3.01, 1.0, 0.51, 0, 0, 0], rtol=1e-6)
    st = op.add(st, rows([3, 4]), np.ones(2, bool))
    np.testing.assert_allclose(st.priority[3:5], [3.01, 3.01], rtol=1e-6)  # current max


def test_uniform_sampling_returns_only_filled_rows():
    rb = Replay(16)
    op = jitted(rb)
    st = op.add(rb.init(EXAMPLE), rows(np.arange(100, 105)), np.ones(5, bool))
    st = op.update_priorities(st, jnp.arange(5), jnp.array([1.0, 50, 1, 1, 1]))  # unused: alpha 0
    batch, idx, w = op.sample(st, jax.random.PRNGKey(0), 3000, beta=0.4)
    idx = np.asarray(idx)
    assert idx.dtype == np.int32 and set(idx.tolist()) == {0, 1, 2, 3, 4}
    np.testing.assert_array_equal(batch["action"], 100 + idx)  # the rows at those slots
    np.testing.assert_allclose(w, 1.0)
    freq = np.bincount(idx, minlength=5) / idx.size
    assert np.all(np.abs(freq - 0.2) < 0.04)


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_prioritised_frequencies_and_weights(alpha):
    rb = Replay(8, alpha=alpha, eps=1e-6)
    op = jitted(rb)
    st = op.add(rb.init(EXAMPLE), rows([0, 1, 2, 3]), np.ones(4, bool))
    pr = np.array([1.0, 2.0, 3.0, 4.0])
    st = op.update_priorities(st, jnp.arange(4), jnp.asarray(pr))
    n = 20_000
    _, idx, w = op.sample(st, jax.random.PRNGKey(1), n, beta=1.0)
    p = pr**alpha / np.sum(pr**alpha)
    freq = np.bincount(np.asarray(idx), minlength=8) / n
    assert freq[4:].sum() == 0
    # sd <= 0.0035 per slot at n = 20000; uniform (0.25 each) would miss slot 0 or 3 by >= 0.05
    np.testing.assert_allclose(freq[:4], p, atol=0.015)
    # w = (N P(i))^-beta / max_j w_j = P_min / P(i) at beta 1
    np.testing.assert_allclose(w, p.min() / p[np.asarray(idx)], rtol=1e-4)
    assert float(jnp.max(w)) == pytest.approx(1.0)
    _, _, w_half = op.sample(st, jax.random.PRNGKey(1), n, beta=0.5)
    np.testing.assert_allclose(w_half, np.sqrt(w), rtol=1e-4)


def test_empty_buffer_samples_without_nan():
    rb = Replay(4, alpha=0.6)
    op = jitted(rb)
    st = rb.init(EXAMPLE)
    assert not bool(can_sample(st, 1)) and not bool(rb.can_sample(st, 0))
    _, idx, w = op.sample(st, jax.random.PRNGKey(0), 7, beta=0.4)
    assert np.all((np.asarray(idx) >= 0) & (np.asarray(idx) < 4))
    np.testing.assert_array_equal(w, 0.0)
    st = op.add(st, rows([5, 6]), np.ones(2, bool))
    assert bool(can_sample(st, 2)) and not bool(can_sample(st, 3))


def test_freeze_keeps_old_segment_while_new_one_wraps():
    rb = Replay(8, n_segments=2)
    op = jitted(rb)
    st = op.add(rb.init(EXAMPLE), rows([0, 1, 2]), np.ones(3, bool))
    assert segments_left(st) == 1 and rb.segments_left(st) == 1
    st = rb.freeze(st)
    assert segments_left(st) == 0 and st.bounds == ((0, 4), (4, 8))
    new = list(range(100, 110))
    for chunk in (new[:3], new[3:4], new[4:]):  # 10 rows into a 4-slot segment: it wraps
        st = op.add(st, rows(chunk), np.ones(len(chunk), bool))
    ids = stored_ids(st)
    assert ids[:3].tolist() == [0, 1, 2]  # frozen: untouched
    slots, ptr, _ = ref_ring(4, new)
    assert ids[4:].tolist() == slots and st.ptr.tolist() == [3, ptr]
    assert st.fill.tolist() == [3, 4] and int(size(st)) == 7
    _, idx, _ = op.sample(st, jax.random.PRNGKey(2), 2000)
    assert set(np.asarray(idx).tolist()) == {0, 1, 2, 4, 5, 6, 7}  # all segments sampled
    with pytest.raises(ConfigError, match="n_segments=2"):
        rb.freeze(st)


def test_traced_freeze_past_the_end_refuses_and_counts():
    rb = Replay(4, n_segments=2)
    st = rb.add(rb.init(EXAMPLE), rows([0, 1]), np.ones(2, bool))
    st = jax.jit(lambda s: rb.freeze(rb.freeze(s)))(st)  # no check possible while tracing
    st = rb.add(st, rows([7, 8, 9]), np.array([1, 1, 0], bool))
    assert stored_ids(st).tolist() == [0, 1, 0, 0] and int(size(st)) == 2  # nothing overwritten
    assert int(st.dropped) == 2 and segments_left(st) < 0


def test_jit_and_vmap_over_a_batch_of_buffers():
    rb = Replay(6, alpha=0.6, n_segments=2)
    op = jitted(rb)
    st1 = rb.init(EXAMPLE)
    sts = jax.tree.map(lambda x: jnp.stack([x] * 3), st1)
    b = rows(np.arange(5))
    masks = np.array([[1, 1, 1, 1, 1], [0, 1, 0, 1, 0], [0, 0, 0, 0, 0]], bool)
    add = jax.jit(jax.vmap(rb.add, in_axes=(0, None, 0)))
    sts = add(sts, b, masks)
    sts = jax.jit(jax.vmap(rb.freeze))(sts)
    sts = add(sts, b, masks[::-1])
    for i in range(3):  # each buffer = the same operations on it alone
        ref = op.add(rb.freeze(op.add(st1, b, masks[i])), b, masks[2 - i])
        got = jax.tree.map(lambda x, i=i: x[i], sts)
        jax.tree.map(np.testing.assert_array_equal, got, ref)
    assert size(sts).tolist() == [3 + 0, 2 + 2, 0 + 3]
    keys = jax.random.split(jax.random.PRNGKey(3), 3)
    batch, idx, w = jax.jit(jax.vmap(lambda s, k: rb.sample(s, k, 64, 0.4)))(sts, keys)
    assert idx.shape == (3, 64) and batch["obs"].shape == (3, 64, 2)
    fill = np.asarray(jax.vmap(lambda s: s.priority > 0)(sts))
    assert all(fill[i][np.asarray(idx[i])].all() for i in range(3))  # filled slots only
    sts = jax.jit(jax.vmap(rb.update_priorities))(sts, idx, jnp.ones_like(w) * 2.0)
    assert not np.isnan(np.asarray(w)).any()


@pytest.mark.parametrize("kw, field", [
    (dict(capacity=0), "capacity"), (dict(capacity=4.0), "capacity"),
    (dict(capacity=8, alpha=-0.1), "alpha"), (dict(capacity=8, alpha=float("nan")), "alpha"),
    (dict(capacity=8, eps=0.0), "eps"), (dict(capacity=8, n_segments=3), "n_segments"),
    (dict(capacity=8, n_segments=0), "n_segments")])
def test_bad_config_is_a_config_error(kw, field):
    with pytest.raises(ConfigError, match=rf"^{field}=") as e:
        Replay(**kw)
    assert "\n" not in str(e.value)


def test_batch_shape_mismatch_is_a_config_error():
    rb = Replay(4)
    with pytest.raises(ConfigError, match="batch"):
        rb.add(rb.init(EXAMPLE), rows([1, 2, 3]), np.ones(2, bool))
