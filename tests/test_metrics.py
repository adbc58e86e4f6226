"""ccjax.metrics on hand-computed cases, Pareto's Table II, and jit/vmap equivalence."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ccjax import metrics as M
from ccjax.sim.stats import hist_add, hist_quantile

# --------------------------------------------------------------------------------------------
# utilization, loss, latency ratio


def test_link_utilization():
    assert float(M.link_utilization([5.0, 10.0, 0.0], [10.0, 10.0, 10.0])) == pytest.approx(0.5)
    per_slot = M.link_utilization(np.array([5.0, 0.0]), np.array([10.0, 0.0]), axis=None)
    np.testing.assert_allclose(per_slot, [0.5, 0.0])  # no capacity -> 0, as summarize
    # a (links, intervals) batch reduces over the intervals
    served = np.array([[1.0, 2.0], [3.0, 3.0]])
    np.testing.assert_allclose(M.link_utilization(served, np.full((2, 2), 4.0)), [0.375, 0.75])


def test_loss_rate():
    assert float(M.loss_rate(1.0, 100.0)) == pytest.approx(0.01)
    assert float(M.loss_rate(0.0, 0.0)) == 0.0  # nothing sent
    assert float(M.loss_rate([1.0, 3.0], [50.0, 50.0], axis=-1)) == pytest.approx(0.04)


def test_latency_ratio():
    assert float(M.latency_ratio(60.0, 40.0)) == pytest.approx(1.5)
    # a series with an empty slot (None in the JSON -> NaN), weighted by delivered bytes
    rtt = np.array([50.0, np.nan, 70.0])
    w = np.array([1.0, 5.0, 3.0])
    assert float(M.latency_ratio(rtt, 50.0, w, axis=-1)) == pytest.approx((50 + 210) / 4 / 50)
    assert math.isnan(float(M.latency_ratio(np.array([np.nan, np.nan]), 50.0, axis=-1)))


# --------------------------------------------------------------------------------------------
# delay percentiles


def test_weighted_quantile_matches_numpy():
    rng = np.random.default_rng(0)
    x = rng.exponential(10.0, size=(3, 57)).astype(np.float32)
    for q in (0.0, 0.5, 0.95, 1.0):
        want = np.quantile(x, q, axis=-1, method="inverted_cdf")
        np.testing.assert_allclose(M.weighted_quantile(x, q=q), want, rtol=1e-6)
    # integer weights = repeated samples
    v = rng.normal(size=20)
    k = rng.integers(0, 5, size=20)
    want = np.quantile(np.repeat(v, k), 0.95, method="inverted_cdf")
    assert float(M.weighted_quantile(v, k, 0.95)) == pytest.approx(want, rel=1e-6)
    # p95 of 1..100 is 95; the axis argument works
    s = np.arange(1.0, 101.0)
    assert float(M.p95_one_way_delay(s)) == 95.0
    np.testing.assert_allclose(M.weighted_quantile(np.stack([s, s], 1), axis=0), [95.0, 95.0])


def test_weighted_quantile_edge_cases():
    assert math.isnan(float(M.weighted_quantile(np.array([1.0, 2.0]), np.array([0.0, 0.0]))))
    assert math.isnan(float(M.weighted_quantile(np.array([np.nan]))))
    # NaN samples and zero weights are ignored
    x = np.array([100.0, np.nan, 1.0, 2.0])
    w = np.array([0.0, 9.0, 1.0, 1.0])
    assert float(M.weighted_quantile(x, w, 0.95)) == 2.0
    # one heavy sample dominates
    assert float(M.weighted_quantile([1.0, 9.0], [1.0, 99.0], 0.95)) == 9.0


def test_one_way_delay_pareto_ceiling():
    # Pareto's 405 ms ceiling: 45 ms one-way propagation + 440 KiB drained at 10 Mbps (360 ms)
    q = 440 * 1024 * 8 / 10e6 * 1e3
    assert float(M.one_way_delay_from_rtt(90.0 + q, 90.0)) == pytest.approx(405.4, abs=0.1)


def test_hist_quantile_delay():
    bins, tick = 64, 1e-3
    base = 0.04
    # no queueing at all: exactly the propagation delay
    h = hist_add(jnp.zeros((1, bins)), jnp.zeros(1), jnp.ones(1))
    d = M.hist_one_way_delay_quantile(h, jnp.zeros(1), tick, base)
    assert float(d[0]) == pytest.approx(base / 2)
    # samples at known queueing delays: within one bin width (~23%) of the exact p95
    rng = np.random.default_rng(1)
    qd = rng.uniform(0.0, 50.0, size=400).astype(np.float32)  # ticks
    h = jnp.zeros((1, bins))
    for v in qd:
        h = hist_add(h, jnp.asarray([v]), jnp.ones(1))
    qmax = jnp.asarray([qd.max()])
    exact = float(np.quantile(qd, 0.95, method="inverted_cdf")) * tick
    ow = float(M.hist_one_way_delay_quantile(h, qmax, tick, base)[0])
    rtt = float(M.hist_one_way_delay_quantile(h, qmax, tick, base, one_way=False)[0])
    assert ow == pytest.approx(base / 2 + exact, rel=0.25)
    assert rtt - ow == pytest.approx(base / 2)
    # the RTT form is what summarize reports as p95_rtt
    assert rtt == pytest.approx(base + float(hist_quantile(h, 0.95, qmax)[0]) * tick)
    # empty histogram: NaN (not the base delay)
    assert math.isnan(float(M.hist_one_way_delay_quantile(jnp.zeros(bins), 0.0, tick, base)))


# --------------------------------------------------------------------------------------------
# fairness


def test_jain_index():
    assert float(M.jain_index([3.0, 3.0, 3.0, 3.0])) == pytest.approx(1.0)
    assert float(M.jain_index([10.0, 0.0])) == pytest.approx(0.5)  # a starved flow counts
    assert float(M.jain_index([60.0, 40.0])) == pytest.approx(0.9615, abs=1e-4)  # Astraea Fig. 4
    assert float(M.jain_index([0.0, 0.0])) == 1.0  # all zero: an equal allocation
    assert float(M.jain_index([7.0, 1.0, 1.0], mask=[True, False, False])) == 1.0
    assert math.isnan(float(M.jain_index([1.0, 2.0], mask=[False, False])))


def test_jain_per_slot_excludes_single_flow_slots():
    thr = np.array([[10.0, 0.0, 0.0],   # one active flow: excluded
                    [6.0, 4.0, 0.0],    # two active
                    [5.0, 5.0, 5.0],    # three active
                    [9.0, 0.0, 3.0]])   # flow 1 active but starved
    act = np.array([[1, 0, 0], [1, 1, 0], [1, 1, 1], [1, 1, 1]], bool)
    j = np.asarray(M.jain_per_slot(thr, act))
    assert math.isnan(j[0])
    np.testing.assert_allclose(j[1:], [100 / 104, 1.0, 144 / 270], rtol=1e-6)
    assert float(M.mean_jain(thr, act)) == pytest.approx((100 / 104 + 1 + 144 / 270) / 3)
    # no slot with two active flows: NaN
    assert math.isnan(float(M.mean_jain(thr[:1], act[:1])))


# --------------------------------------------------------------------------------------------
# convergence


def _arrival_series(excursion: bool = False):
    """Capacity 100, slot 0.1 s: flow 0 alone for 1 s, flow 1 arrives at t = 1 s and ramps."""
    f1 = [10, 20, 30, 40, 48] + [50] * 15
    if excursion:
        f1[6] = 40  # leaves the ±10% band once (slot 16)
    f1 = np.array([0.0] * 10 + f1)
    f0 = np.where(np.arange(30) < 10, 100.0, 100.0 - f1)
    thr = np.stack([f0, f1], -1)
    act = np.stack([np.ones(30, bool), np.arange(30) >= 10], -1)
    return thr, act


def test_convergence_time_arrival():
    thr, act = _arrival_series()
    # first in-band slot is 14 (48 / 52 vs 50), held from there: (14 + 1) * 0.1 - 1.0 = 0.5 s
    t = float(M.convergence_time(thr, act, 100.0, 1.0, 0.1, hold_s=0.5))
    assert t == pytest.approx(0.5)
    thr, act = _arrival_series(excursion=True)
    # the excursion at slot 16 breaks the hold; it holds again from slot 17
    assert float(M.convergence_time(thr, act, 100.0, 1.0, 0.1, hold_s=0.5)) == pytest.approx(0.8)
    # hold 0: the literal "first reaches the band" reading
    assert float(M.convergence_time(thr, act, 100.0, 1.0, 0.1, hold_s=0.0)) == pytest.approx(0.5)
    # with a ±20% band, 40 / 60 (slot 13) is already in band
    assert float(M.convergence_time(thr, act, 100.0, 1.0, 0.1, hold_s=0.0, tol=0.2)) \
        == pytest.approx(0.4)
    # an event time between slot boundaries: the window starts at the next slot (slot 11)
    assert float(M.convergence_time(thr, act, 100.0, 1.05, 0.1, hold_s=0.0)) \
        == pytest.approx(0.45)


def test_convergence_never_is_inf():
    thr, act = _arrival_series()
    thr[10:, 1] = 30.0  # the newcomer stays at 30 of a 50 share
    thr[10:, 0] = 70.0
    assert float(M.convergence_time(thr, act, 100.0, 1.0, 0.1)) == math.inf
    assert math.isnan(float(M.post_convergence_std(thr, act, 100.0, 1.0, 0.1, 1)))
    # converged, but the window (next event at 1.6 s) is too short for a 1 s hold
    thr, act = _arrival_series()
    assert float(M.convergence_time(thr, act, 100.0, 1.0, 0.1, end_s=1.6)) == math.inf
    assert float(M.convergence_time(thr, act, 100.0, 1.0, 0.1, end_s=2.5)) == pytest.approx(0.5)


def test_convergence_departure_and_flow_selection():
    # two flows at 50/50; flow 1 leaves at t = 1 s; flow 0 ramps 60, 75, 92, 100, ...
    f0 = np.array([50.0] * 10 + [60, 75, 92] + [100.0] * 7)
    f1 = np.array([50.0] * 10 + [0.0] * 10)
    thr = np.stack([f0, f1], -1)
    act = np.stack([np.ones(20, bool), np.arange(20) < 10], -1)
    assert float(M.convergence_time(thr, act, 100.0, 1.0, 0.1, hold_s=0.3)) == pytest.approx(0.3)
    # restricting the criterion to the departed flow leaves nothing to judge: never
    only1 = np.array([False, True])
    assert float(M.convergence_time(thr, act, 100.0, 1.0, 0.1, flows=only1)) == math.inf


def test_post_convergence_std():
    thr, act = _arrival_series()
    thr[20:, 1] = [52, 48, 50, 53, 47, 50, 51, 49, 50, 50]
    thr[20:, 0] = 100 - thr[20:, 1]
    s = float(M.post_convergence_std(thr, act, 100.0, 1.0, 0.1, 1, hold_s=0.5))
    assert s == pytest.approx(np.std(thr[14:, 1]), rel=1e-6)  # from k* = 14, ddof = 0
    # zero-variance flow after convergence
    thr, act = _arrival_series()
    assert float(M.post_convergence_std(thr, act, 100.0, 1.0, 0.1, 1, hold_s=0.5, end_s=2.0)) \
        == pytest.approx(np.std(thr[14:20, 1]))


def test_slot_activity_full_slots_only():
    a = np.asarray(M.slot_activity([0.0, 0.25, 0.0], [np.inf, 0.65, 0.95], 0.1, 10,
                                   end_s=0.95))
    np.testing.assert_array_equal(a[:, 0], np.ones(10, bool))
    np.testing.assert_array_equal(np.nonzero(a[:, 1])[0], [3, 4, 5])  # [0.3, 0.6) only
    np.testing.assert_array_equal(a[:, 2], np.ones(10, bool))  # the short last slot counts
    ticks = np.array([[100.0, 40.0], [100.0, 100.0], [60.0, 60.0]])
    np.testing.assert_array_equal(M.active_from_ticks(ticks, np.array([100, 100, 60])),
                                  [[True, False], [True, True], [True, True]])


# --------------------------------------------------------------------------------------------
# friendliness


def test_friendliness_ratio():
    assert float(M.friendliness_ratio(10.0, 5.0)) == pytest.approx(2.0)  # MOCC: two flows
    assert float(M.friendliness_ratio(5.0, [4.0, 6.0], axis=-1)) == pytest.approx(1.0)  # Astraea
    assert float(M.friendliness_ratio(3.0, 0.0)) == math.inf  # Cubic starved
    assert math.isnan(float(M.friendliness_ratio(0.0, 0.0)))
    assert float(M.friendliness_ratio(0.0, 4.0)) == 0.0


# --------------------------------------------------------------------------------------------
# Ankh's number: Pareto Table II

# (throughput Mbps, p95 one-way delay ms, loss %, printed Ankh) per row; C = mean bandwidth
TABLE_II = {
    "fixed 50 Mbps": (50.0, [
        ("Bootstrap", 45.91, 101.06, 0.79, 0.320), ("Advance", 43.37, 79.48, 0.64, 0.275),
        ("Fair", 42.56, 106.78, 1.08, 0.360), ("Online", 42.15, 97.79, 0.81, 0.336),
        ("Online-More", 41.84, 93.93, 0.96, 0.327), ("BBR", 47.87, 116.00, 1.70, 0.353)]),
    "dynamic 10&20 Mbps": (15.0, [
        ("Bootstrap", 13.04, 404.97, 7.97, 0.403), ("Advance", 12.52, 336.05, 0.87, 0.335),
        ("Fair", 13.24, 400.595, 3.03, 0.379), ("Online", 13.20, 348.136, 2.95, 0.336),
        ("Online-More", 13.36, 400.43, 2.81, 0.375), ("BBR", 14.06, 366.18, 0.90, 0.325)]),
    "dynamic 10&30 Mbps": (20.0, [
        ("Bootstrap", 14.81, 405.15, 9.50, 0.452), ("Advance", 14.48, 404.99, 4.82, 0.441),
        ("Fair", 17.44, 405.16, 8.32, 0.404), ("Online", 16.72, 405.14, 11.21, 0.425),
        ("Online-More", 17.34, 404.98, 8.92, 0.407), ("BBR", 17.17, 404.74, 3.78, 0.393)]),
    "fixed 50 Mbps, 2 flows": (50.0, [
        ("Bootstrap", 45.63, 98.76, 0.84, 0.312), ("Advance", 42.7, 86.47, 0.60, 0.296),
        ("Fair", 44.14, 98.07, 0.80, 0.320), ("Online", 43.84, 94.87, 0.40, 0.312),
        ("Online-More", 43.91, 90.63, 0.41, 0.299), ("BBR", 49.07, 117.39, 6.95, 0.363)]),
}
# the table prints 3 decimals (±0.0005) from inputs rounded to 0.01 (≈ ±0.00006 more)
ANKH_TOL = 0.0006


def test_ankh_first_row_by_hand():
    # fixed 50 Mbps, Pareto-Bootstrap, d_max = BBR's 116.00 ms:
    # [(1 - 45.91/50) + 101.06/116 + 0.0079] / 3 = [0.0818 + 0.87121 + 0.0079] / 3 = 0.32030
    a = float(M.ankh_number(45.91, 50.0, 101.06, 0.0079, d_max=116.0))
    assert a == pytest.approx(0.32030, abs=1e-5)
    assert a == pytest.approx(0.320, abs=0.0005)
    # Eq. 10 as printed (U = (R-C)/C, |(d_max-d)/d_max|, loss in %) does not give the table
    printed = ((1 - (45.91 - 50) / 50) + abs((116 - 101.06) / 116) + 0.79) / 3
    assert printed == pytest.approx(0.667, abs=1e-3)


@pytest.mark.parametrize("env", list(TABLE_II))
def test_ankh_reproduces_pareto_table_ii(env):
    cap, rows = TABLE_II[env]
    thr = np.array([r[1] for r in rows])
    d95 = np.array([r[2] for r in rows])
    loss = np.array([r[3] for r in rows]) / 100.0
    want = np.array([r[4] for r in rows])
    # d_max defaults to the largest p95 delay of the schemes compared (along the last axis)
    got = np.asarray(M.ankh_number(thr, cap, d95, loss))
    np.testing.assert_allclose(got, want, atol=ANKH_TOL)
    # the ranking the paper draws from the table is preserved
    assert np.argmin(got) == np.argmin(want)


# --------------------------------------------------------------------------------------------
# MOCC reward


def test_mocc_reward_corners():
    w = np.array([0.6, 0.3, 0.1])
    # a perfect link (full capacity, base latency, no loss): r = sum(w)
    assert float(M.mocc_reward(w, 10.0, 10.0, 40.0, 40.0, 0.0)) == pytest.approx(1.0)
    assert float(M.mocc_reward([0.2, 0.2, 0.2], 10.0, 10.0, 40.0, 40.0, 0.0)) \
        == pytest.approx(0.6)
    # hand-computed: O = (0.5, 0.5, 0.8) -> 0.6*0.5 + 0.3*0.5 + 0.1*0.8 = 0.53
    assert float(M.mocc_reward(w, 5.0, 10.0, 80.0, 40.0, 0.2)) == pytest.approx(0.53)
    # zero throughput, no RTT sample (NaN latency): O_thr = O_lat = 0, reward = w_loss
    assert float(M.mocc_reward(w, 0.0, 10.0, np.nan, 40.0, 0.0)) == pytest.approx(0.1)
    # everything lost: reward 0 (O_lat also 0 with no sample)
    assert float(M.mocc_reward(w, 0.0, 10.0, np.nan, 40.0, 1.0)) == 0.0
    # clipping: throughput above capacity and RTT below base count as 1
    np.testing.assert_allclose(M.mocc_objectives(12.0, 10.0, 35.0, 40.0, 0.0), [1.0, 1.0, 1.0])
    # MOCC's bulk-transfer weight <1, 0, 0> is pure utilization
    assert float(M.mocc_reward([1.0, 0.0, 0.0], 7.0, 10.0, 400.0, 40.0, 0.3)) \
        == pytest.approx(0.7)
    # batched weights
    ws = np.array([[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0]])
    np.testing.assert_allclose(M.mocc_reward(ws, 5.0, 10.0, 80.0, 40.0, 0.2), [0.5, 0.5, 0.8])


# --------------------------------------------------------------------------------------------
# jit + vmap == loop


def test_jit_vmap_matches_loop():
    rng = np.random.default_rng(3)
    B, T, F = 4, 40, 3
    thr = rng.uniform(20.0, 45.0, size=(B, T, F)).astype(np.float32)
    thr[1, 12:, :] = 100.0 / 3  # link 1 converges exactly at slot 12
    thr[2, 5:, :] = [31.0, 33.0, 36.0]
    act = np.ones((B, T, F), bool)
    act[:, :10, 2] = False  # flow 2 arrives at t = 1 s
    act[3, :, 1] = False  # link 3 has two flows
    cap = np.full((B, T), 100.0, np.float32)
    event = np.array([1.0, 1.0, 1.0, 0.5], np.float32)

    def per_link(th, ac, cp, ev):
        return dict(
            conv=M.convergence_time(th, ac, cp, ev, 0.1, hold_s=0.5),
            std=M.post_convergence_std(th, ac, cp, ev, 0.1, 2, hold_s=0.5),
            jain=M.mean_jain(th, ac),
            p95=M.p95_one_way_delay(th[..., 0], th[..., 1]),
            util=M.link_utilization(th.sum(-1), cp),
        )

    batched = jax.jit(jax.vmap(per_link))(thr, act, cap, event)
    # the functions also broadcast over leading axes without vmap
    direct = per_link(thr, act, cap, event)
    for b in range(B):
        one = per_link(thr[b], act[b], cap[b], event[b])
        for k, v in one.items():
            np.testing.assert_allclose(batched[k][b], v, rtol=1e-5, err_msg=k)
            np.testing.assert_allclose(direct[k][b], v, rtol=1e-5, err_msg=k)
    assert float(batched["conv"][1]) == pytest.approx(0.3)  # (12 + 1) * 0.1 - 1.0
    assert float(batched["conv"][2]) == pytest.approx(0.1)  # in band from the first slot
    assert np.isinf(batched["conv"][0])
    assert np.isnan(batched["std"][0])

    w = rng.dirichlet(np.ones(3), size=B)
    args = [rng.uniform(0, 12, B), np.full(B, 10.0), rng.uniform(40, 90, B), np.full(B, 40.0),
            rng.uniform(0, 0.1, B)]
    r = jax.jit(jax.vmap(M.mocc_reward))(w, *args)
    for b in range(B):
        assert float(r[b]) == pytest.approx(float(M.mocc_reward(w[b], *[a[b] for a in args])),
                                            rel=1e-6)
    a = jax.jit(M.ankh_number)(*[np.asarray(x) for x in ([40.0, 45.0], 50.0, [80.0, 100.0],
                                                         [0.01, 0.02])])
    np.testing.assert_allclose(a, [(0.2 + 0.8 + 0.01) / 3, (0.1 + 1.0 + 0.02) / 3], rtol=1e-6)
    # a scheme without a delay (NaN) gets NaN; d_max comes from the others
    a = M.ankh_number([40.0, 45.0, 30.0], 50.0, [80.0, 100.0, np.nan], [0.01, 0.02, 0.0])
    np.testing.assert_allclose(a[:2], [(0.2 + 0.8 + 0.01) / 3, (0.1 + 1.0 + 0.02) / 3], rtol=1e-6)
    assert np.isnan(a[2])
    # friendliness against no Cubic throughput (NaN) is NaN, not +inf; a starved Cubic is +inf
    f = M.friendliness_ratio(np.array([3.0, 3.0, 0.0]), np.array([np.nan, 0.0, 0.0]))
    assert np.isnan(f[0]) and f[1] == np.inf and np.isnan(f[2])


# --------------------------------------------------------------------------------------------
# summary_metrics


def _summary(thr_series, starts, base=40.0, slot=0.1, cap=10.0):
    T = len(thr_series[0])
    flows = []
    for i, s in enumerate(thr_series):
        s = np.asarray(s, float)
        act_s = T * slot - starts[i]
        flows.append({
            "throughput_mbps": float(s.sum() * slot / act_s), "mean_rtt_ms": base * 1.25,
            "p95_rtt_ms": base + 30.0, "loss_rate": 0.01 * (i + 1),
            "delivered_bytes": float(s.sum() * slot * 1e6 / 8), "base_rtt_ms": base,
            "start_s": starts[i], "throughput_series_mbps": s.tolist(),
            "rtt_series_ms": [base * 1.25 if v > 0 else None for v in s]})
    tot = np.sum(thr_series, 0)
    return {"flows": flows,
            "link": {"utilization": float(tot.mean() / cap), "drop_rate": 0.02,
                     "capacity_mbps": cap, "utilization_series": (tot / cap).tolist()},
            "sim": {"ticks": int(round(T * slot * 1000)), "tick_s": 1e-3,
                    "series_interval_s": slot}}


def test_summary_metrics_synthetic():
    # flow 0 alone at 10 for 1 s, flow 1 joins at 1 s and both sit at 5/5 after 0.2 s
    f0 = [10.0] * 10 + [8.0, 6.0] + [5.0] * 18
    f1 = [0.0] * 10 + [2.0, 4.0] + [5.0] * 18
    s = _summary([f0, f1], [0.0, 1.0])
    m = M.summary_metrics(s, w=[0.6, 0.3, 0.1], cubic_flows=[1], d_max_ms=100.0, hold_s=0.5)
    assert m["utilization"] == pytest.approx(1.0)
    assert m["latency_ratio_flows"] == pytest.approx([1.25, 1.25])
    assert m["latency_ratio"] == pytest.approx(1.25)
    assert m["p95_one_way_delay_ms_flows"] == pytest.approx([50.0, 50.0])  # 20 + 30
    assert m["jain_slots_count"] == 20  # slots 10..29; slots 0..9 have one flow
    want_j = (M.jain_index([8.0, 2.0]) + M.jain_index([6.0, 4.0]) + 18) / 20
    assert m["jain_slots_mean"] == pytest.approx(float(want_j), rel=1e-6)
    (ev,) = m["convergence"]
    assert ev["kind"] == "arrival" and ev["flows"] == [1]
    assert ev["convergence_s"] == pytest.approx(0.3)  # slot 12 is the first in band
    assert ev["stability_mbps"] == pytest.approx(0.0, abs=1e-6)
    assert m["convergence_mean_s"] == pytest.approx(0.3)
    thr0, thr1 = s["flows"][0]["throughput_mbps"], s["flows"][1]["throughput_mbps"]
    assert m["friendliness"] == {0: pytest.approx(thr0 / thr1)}
    # Ankh's R_avg is what the link carried (full: 10 Mbps), not the sum of the flows' lifetime
    # averages, which flow 1's late start inflates past the capacity
    assert thr0 + thr1 > 10.5
    assert m["ankh_inputs"]["throughput_mbps"] == pytest.approx(10.0)
    assert m["ankh"] == pytest.approx((0.0 + 50 / 100 + 0.02) / 3, rel=1e-5)
    o = (min(thr0 / 10, 1), 0.8, 0.99)
    assert m["mocc_reward_flows"][0] == pytest.approx(0.6 * o[0] + 0.3 * o[1] + 0.1 * o[2])


def test_summary_metrics_departure_and_single_flow():
    # flow 1 leaves at 1 s; flow 0 never takes its share back -> departure never converges
    f0 = [5.0] * 20
    f1 = [5.0] * 10 + [0.0] * 10
    m = M.summary_metrics(_summary([f0, f1], [0.0, 0.0]), stop_s=[math.inf, 1.0])
    (ev,) = m["convergence"]
    assert ev["kind"] == "departure" and ev["convergence_s"] == math.inf
    assert math.isnan(ev["stability_mbps"])
    assert m["convergence_mean_s"] == math.inf
    assert m["jain_slots_count"] == 10 and m["jain_slots_mean"] == pytest.approx(1.0)
    # without stop_s the departed flow counts as active and starved
    m2 = M.summary_metrics(_summary([f0, f1], [0.0, 0.0]))
    assert m2["jain_slots_count"] == 20 and m2["jain_slots_mean"] == pytest.approx(0.75)
    # one flow: no Jain slot, no event
    m1 = M.summary_metrics(_summary([[10.0] * 5], [0.0]))
    assert math.isnan(m1["jain_slots_mean"]) and m1["jain_slots_count"] == 0
    assert m1["convergence"] == [] and math.isnan(m1["convergence_mean_s"])
    # friendliness needs at least one Cubic flow among the link's flows
    for bad in ([], [1]):
        with pytest.raises(ValueError, match="cubic_flows"):
            M.summary_metrics(_summary([[10.0] * 5], [0.0]), cubic_flows=bad)


def test_summary_metrics_on_a_real_run():
    from ccjax.api import link_from_flags, simulate

    # 8 Mbps, two 4 Mbps senders: fair as soon as flow 1 arrives; never after flow 0 leaves
    spec = link_from_flags(flows=2, bw_mbps=8.0, rtt_ms=(40.0,), start_s=(0.0, 1.0),
                           stop_s=(3.0, 5.0), buffer_pkts=50)
    s = simulate([spec], rate_mbps=4.0, duration_s=4.0, model="fluid").summary()
    m = M.summary_metrics(s, stop_s=[3.0, 5.0], hold_s=0.5)
    arr, dep = m["convergence"]
    assert arr["kind"] == "arrival" and 0.0 < arr["convergence_s"] <= 0.2
    assert arr["stability_mbps"] < 0.1
    assert dep["kind"] == "departure" and dep["convergence_s"] == math.inf
    assert m["jain_slots_mean"] > 0.99
    # an idle link: the mean RTT is the least a data packet sees (``rtt_floor_ms``)
    assert m["latency_ratio_flows"] == pytest.approx([1.0, 1.0], abs=1e-3)
    # the one-way delay keeps the packet's transmission: 1500 bytes at 8 Mbps take 1.5 ms, of
    # which the fluid model's RTTs carry up to its 1 ms tick (``core.transmission_ticks``)
    assert m["p95_one_way_delay_ms_flows"] == pytest.approx([21.0, 21.0], abs=0.5)
    assert [f["rtt_floor_ms"] for f in s["flows"]] == pytest.approx([41.0, 41.0], abs=1e-4)
