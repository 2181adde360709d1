"""experiments/bonus_sim.py: the corrected routing (a non-caller's decision token is the summary's first)."""
from experiments import bonus_sim


def test_slca_routes_the_no_call_choice_to_the_summary_so_k_moves_both_algorithms():
    """At K = 2 the summary pays for the call: under GRPO through the shared advantage, under SLCA
    through the non-callers' Â_sum on their summary's first token, so both call rates rise with K;
    at K = 0 SLCA's callers see only the process penalty (Â_tool), so its rate falls below GRPO's."""
    last = lambda r: sum(r[40:]) / len(r[40:])  # noqa: E731  the last third of 60 steps
    rate = {(algo, k): [last(bonus_sim.run(algo, k, 0.03, s)) for s in range(2)] for algo in ("slca", "grpo")
            for k in (0, 2)}
    for algo in ("slca", "grpo"):
        assert all(k2 > k0 + 0.3 for k0, k2 in zip(rate[(algo, 0)], rate[(algo, 2)])), rate
    assert all(s < g for s, g in zip(rate[("slca", 0)], rate[("grpo", 0)])) and max(rate[("slca", 0)]) < 0.5


def test_the_wrong_argument_sits_inside_the_call_so_slca_does_not_see_k():
    """--arg: the contested value is a tool token whichever way it goes, so SLCA's rate is the
    same at K = 0 and K = 1 (the same draws), while GRPO's rises with K."""
    for s in range(2):
        slca = [bonus_sim.run("slca", k, 0.03, s, arg=True) for k in (0, 1)]
        grpo = [sum(bonus_sim.run("grpo", k, 0.03, s, arg=True)[40:]) / 20 for k in (0, 1)]
        assert slca[0] == slca[1] and grpo[1] > grpo[0] + 0.3


def test_decision_credit_takes_k_out_of_the_call_choice():
    """Eq. 15 in the toy: both branches of the call choice are paid Â_tool, so the summary reaches
    it only through the optimizer's shared scale (Adam's one second moment, which the `state`
    choice's Â_sum gradient enters): the K = 2 - K = 0 effect is near zero, far below SLCA's."""
    last = lambda r: sum(r[40:]) / len(r[40:])  # noqa: E731
    for s in range(2):
        dec = [last(bonus_sim.run("slca-decision", k, 0.03, s)) for k in (0, 2)]
        slca = [last(bonus_sim.run("slca", k, 0.03, s)) for k in (0, 2)]
        assert abs(dec[1] - dec[0]) < 0.02 and slca[1] - slca[0] > 0.3 and dec[0] < 0.5, (dec, slca)
