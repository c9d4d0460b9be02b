"""Carried levels (issue 34): one load steps down from its highest concurrency, keeping an
evenly aged subset of its clients, and measures each level's window on the same streams."""

import pytest
from studylib.instruments.serving.decode_load import LoadSpec, level_window, run_load
from studylib.instruments.serving.engines.sglang_engine import requests_held
from studylib.instruments.serving.load_stagger import kept_clients
from studylib.instruments.serving.load_summary import summarize_load
from test_serving import standin


def test_the_kept_clients_are_the_middle_of_equal_groups_by_tokens_left():
    # Eight clients, their requests 10, 20, ... 80 tokens from their ends (client 7 nearest).
    remaining = {client: 80 - 10 * client for client in range(8)}
    assert kept_clients(remaining, 4) == {6, 4, 2, 0}  # 20, 40, 60, 80 left: evenly spread
    assert kept_clients(remaining, 2) == {5, 1}  # 30 and 70 left
    assert kept_clients(remaining, 1) == {3}  # the median: 50 left
    assert kept_clients(remaining, 8) == set(range(8))
    with pytest.raises(ValueError, match="keep 9 of 8"):
        kept_clients(remaining, 9)


@pytest.mark.parametrize("then", [(4, 8), (4, 4), (0,)])
def test_carried_levels_step_down(then):
    with pytest.raises(ValueError, match="step down from 8"):
        LoadSpec(concurrency=8, input_len=4, output_len=40, duration_s=1.0, then=then)


def test_carried_levels_need_a_timed_load():
    with pytest.raises(ValueError, match="in a timed load"):
        LoadSpec(concurrency=8, input_len=4, output_len=40, num_prompts=8, then=(4,))


def test_a_carried_load_measures_each_level_on_the_streams_it_keeps(tmp_path):
    # 8 staggered clients, then 4, then 1. The stand-in holds a cancelled request 0.3 s
    # longer (as SGLang does until it notices the closed connection): each later level's
    # window starts only once the server holds no more than its requests.
    spec = LoadSpec(concurrency=8, then=(4, 1), duration_s=0.4, input_len=4, output_len=40,
                    vocab_size=500, stagger=True, warmup_s=0.2)  # fmt: skip
    server, port = standin(tmp_path, "--token-delay", "0.002", "--linger-cancelled", "0.3")
    url = f"http://127.0.0.1:{port}"
    with server:
        server.wait_ready()
        load = run_load(url, "standin", spec, {"ignore_eos": True},
                        held=lambda: requests_held(url))  # fmt: skip
    assert not any(r.error for r in load.records)
    assert [level["concurrency"] for level in load.levels] == [8, 4, 1]
    windows = [level_window(load, k) for k in range(3)]
    assert all(w is not None and w[1] - w[0] >= 0.4 for w in windows)
    for (_, end), (start, _) in zip(windows, windows[1:], strict=False):
        assert end < start  # one after another
    for level, (s0, _) in zip(load.levels[1:], windows[1:], strict=True):
        assert s0 - level["begin"] >= 0.3  # the dropped requests lingered that long
        assert level["held"] <= level["concurrency"]
    for c, (s0, s1) in zip([8, 4, 1], windows, strict=True):
        at_start = [n for t, n in load.active if t <= s0][-1]
        inside = [at_start] + [n for t, n in load.active if s0 < t < s1]
        assert max(inside) == c and min(inside) == c
        streams = {r.client for r in load.records if any(s0 <= t <= s1 for t in r.token_times)}
        assert len(streams) == c
        summary = summarize_load(load.records, LoadSpec(**{**spec.__dict__, "then": (),
                                                           "concurrency": c}), s0, s1)  # fmt: skip
        assert summary["tpot_ms"] and summary["errors"] == 0
    # The clients kept at each step are among those before it; the others' requests were cut.
    by_level = [{r.client for r in load.records if r.start <= s1 and (r.end or s1) >= s0}
                for s0, s1 in windows]  # fmt: skip
    assert by_level[2] <= by_level[1] <= by_level[0]
    step = load.levels[1]["begin"]
    assert sum(1 for r in load.records if r.cut and abs(r.end - step) < 1.0) >= 4
