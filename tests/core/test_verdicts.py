"""The one rule of every verdict (core/verdicts.py): margins against noise, rankings, ties,
stretches of sizes, judgements against a threshold."""

import math

import pytest
from studylib.core.verdicts import (
    NOISE_FLOOR,
    Contender,
    against_threshold,
    beyond,
    decision_noise,
    rank,
    run_to_run,
    spread,
    stretches,
)


def test_noise_is_the_larger_spread_and_never_below_the_floor():
    assert spread(1.0, 10.0) == pytest.approx(0.1) and math.isnan(spread(1.0, 0.0))
    assert run_to_run(110, 100) == pytest.approx(0.1) == run_to_run(100, 110)
    assert decision_noise(0.01, float("nan")) == NOISE_FLOOR
    assert decision_noise(0.01, 0.12) == 0.12
    assert beyond(0.05, 0.03) and not beyond(0.03, 0.03) and not beyond(float("nan"), 0.03)


def test_a_ranking_ties_within_noise_and_its_runner_up_is_beyond_it():
    # b is 2 % behind a (a tie under the 3 % floor); c 10 % behind: the runner-up.
    r = rank([Contender("a", 10.0), Contender("b", 10.2), Contender("c", 11.0)])
    assert r.tied == ("a", "b") and r.status == "tie"
    assert r.runner_up.who == "c" and r.margin == pytest.approx(0.1) and r.noise == NOISE_FLOOR
    # a noisy runner-up (IQR 15 %) is no runner-up: it ties
    r = rank([Contender("a", 10.0), Contender("c", 11.0, noise=0.15)])
    assert r.tied == ("a", "c") and r.runner_up is None


def test_ties_are_not_transitive_and_the_runner_ups_margin_is_the_one_decided():
    # b ties a (2.5 %), c ties b (1.4 %) but not a (3.9 %): c is the runner-up, and its margin
    # is over the fastest, beyond the noise it had to beat (not its 1.4 % to b).
    r = rank([Contender("a", 6.00), Contender("b", 6.15), Contender("c", 6.235)])
    assert r.tied == ("a", "b") and r.runner_up.who == "c"
    assert r.margin == pytest.approx(0.235 / 6.0) and beyond(r.margin, r.noise)


def test_a_steadier_faster_contender_is_never_the_runner_up_of_a_noisy_tie():
    # d (20 % IQR) ties a; b, faster than d, is tied too rather than named runner-up
    r = rank([Contender("a", 10.0), Contender("b", 10.5), Contender("d", 11.5, noise=0.2)])
    assert r.tied == ("a", "b", "d") and r.runner_up is None


def test_stretches_merge_sizes_while_one_contender_leads_at_every_one():
    def at(*names):
        return rank([Contender(n, 10.0 + 0.1 * i) for i, n in enumerate(names)])

    ranked = [(1, at("a", "b")), (2, at("a")), (4, at("b", "a")), (8, at("c")), (16, at("c"))]
    parts = stretches(ranked)
    assert [s.keys for s in parts] == [(1, 2, 4), (8, 16)]
    assert parts[0].always == ("a",) and parts[0].sometimes == {"b": (1, 4)}
    assert parts[0].status == "tie" and parts[1].status == "answered"


def test_a_judgement_within_noise_of_its_threshold_is_undecided():
    assert against_threshold(0.80, 0.5, 0.1) == ("yes", pytest.approx(0.6))
    assert against_threshold(0.20, 0.5, 0.1)[0] == "no"
    assert against_threshold(0.52, 0.5, 0.1)[0] == "undecided"


def test_a_margin_and_its_noise_never_print_alike():
    # Whole percents where they tell the two apart; a decimal or two where they would not
    # (the report's "3 % > 3 % noise" beside a tie read as a contradiction).
    from studylib.core.answer_records import Answer, margin_text

    def text(margin, noise):
        status = "answered" if margin > noise else "undecided"
        return margin_text(Answer(1, "s", status, margin=margin, noise=noise))

    assert text(0.12, 0.03) == "12 % > 3 % noise"
    assert text(0.034, 0.03) == "3.4 % > 3.0 % noise"
    assert text(0.0301, 0.03) == "3.01 % > 3.00 % noise"
    assert text(0.03, 0.03) == "3.00 % ≤ 3.00 % noise"
    assert text(0.004, 0.03) == "< 1 % ≤ 3 % noise"
    assert text(float("nan"), 0.03) == "—"
