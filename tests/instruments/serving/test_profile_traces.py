"""Decode-step breakdowns from torch.profiler traces
(scripts/studylib/instruments/serving/profile_traces.py)."""

import gzip
import json

import pytest
import synthetic_trace as synth
from studylib.instruments.serving.profile_traces import (
    RANK_COLUMNS,
    Kernel,
    TraceError,
    breakdown_rows,
    busy_us,
    rank_breakdown,
    read_kernels,
    trace_files,
)
from studylib.instruments.step_components import COMPONENTS


def trace_file_name(prefix: str, profile_id: str, rank: int) -> str:
    """The file SGLang writes for TP rank ``rank`` (without DP/PP/EP parts)."""
    return f"{prefix}-{profile_id}-TP-{rank}.trace.json.gz"


def trace_breakdown(path, layers: int) -> dict:
    """The breakdown of one trace file, as the decode job reads it."""
    return rank_breakdown(read_kernels(path), layers, where=str(path))


def kernel_events(trace: dict) -> list[dict]:
    return [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]


def spans(trace: dict) -> tuple[float, float]:
    """(first start to last end, sum of durations) of a trace's kernels, computed here."""
    kernels = kernel_events(trace)
    span = max(e["ts"] + e["dur"] for e in kernels) - min(e["ts"] for e in kernels)
    return span, sum(e["dur"] for e in kernels)


@pytest.mark.parametrize("ranks", [1, 2])
def test_a_decode_trace_gives_each_components_time_per_step(tmp_path, ranks):
    steps, layers = 5, 3
    path = synth.write_trace(tmp_path / trace_file_name("decode", "c4-x", 0), steps, layers,
                             ranks=ranks)  # fmt: skip
    result = trace_breakdown(path, layers)
    assert result["steps"] == steps
    expected = synth.expected_per_step(layers, ranks)
    for component in COMPONENTS:
        us, count = expected.get(component, (0.0, 0))
        got = result["components"][component]
        assert got["us_per_step"] == pytest.approx(us)
        assert got["kernels_per_step"] == pytest.approx(count)
    assert (result["components"]["communication"]["us_per_step"] > 0) == (ranks > 1)
    # The kernels never overlap here: busy is their summed time, span adds the gaps.
    span, total = spans(synth.trace(steps, layers, ranks))
    assert result["busy_us_per_step"] == pytest.approx(total / steps)
    assert result["span_us_per_step"] == pytest.approx(span / steps)
    assert result["idle_us_per_step"] == pytest.approx((span - total) / steps)
    assert result["idle_us_per_step"] > 0
    assert result["prefill_us"] == 0 and result["prefill_in_window"] is False


def test_only_kernels_count_not_runtime_copies_or_annotations(tmp_path):
    path = synth.write_trace(tmp_path / "t.trace.json.gz", 2, 1)
    trace = synth.trace(2, 1)
    assert {e["cat"] for e in trace["traceEvents"]} > {"kernel"}
    assert len(read_kernels(path)) == len(kernel_events(trace))
    plain = synth.write_trace(tmp_path / "t.trace.json", 2, 1)  # also read uncompressed
    assert read_kernels(plain) == read_kernels(path)


def test_a_prefill_pass_in_the_window_is_flagged_and_not_counted_as_a_step(tmp_path):
    steps, layers = 4, 2
    path = synth.write_trace(tmp_path / "p.trace.json.gz", steps, layers, prefill_after=1)
    result = trace_breakdown(path, layers)
    assert result["steps"] == steps  # the prefill pass has no decode attention
    assert result["prefill_in_window"] is True
    assert result["prefill_us"] == pytest.approx(layers * 40.0)  # its extend attention
    decode_moe = synth.expected_per_step(layers)["moe"][0]
    moe = result["components"]["moe"]["us_per_step"]
    assert moe == pytest.approx((steps * decode_moe + layers * 60.0) / steps)  # weighs in


def test_the_files_of_every_rank_are_found_whatever_their_suffix(tmp_path):
    for rank in (0, 1):
        synth.write_trace(tmp_path / trace_file_name("decode", "c16-1", rank), 2, 2, ranks=2)
    synth.write_trace(tmp_path / "decode-c16-1-TP-2-EP-2.trace.json.gz", 2, 2, ranks=2)
    synth.write_trace(tmp_path / "decode-c32-1-TP-0.trace.json.gz", 2, 2)  # another profile
    (tmp_path / "decode-c16-1-TP-3.trace.json.gz.tmp").write_text("x")  # not a trace name
    found = trace_files(tmp_path, "decode", "c16-1")
    assert sorted(found) == [0, 1, 2]
    assert found[2].name == "decode-c16-1-TP-2-EP-2.trace.json.gz"
    by_rank = {rank: trace_breakdown(path, 2) for rank, path in found.items()}
    rows = breakdown_rows(by_rank, {"variant": "v", "concurrency": 16})
    assert len(rows) == 3 * len(COMPONENTS)
    assert [r["rank"] for r in rows[:: len(COMPONENTS)]] == [0, 1, 2]
    assert [r["component"] for r in rows[: len(COMPONENTS)]] == list(COMPONENTS)
    for row in rows:
        assert {*RANK_COLUMNS, "us_per_step", "kernels_per_step", "variant"} <= set(row)
        assert row["idle_us_per_step"] == pytest.approx(
            row["span_us_per_step"] - row["busy_us_per_step"]
        )


def test_busy_time_is_the_union_of_overlapping_kernels():
    kernels = [Kernel("a", 0.0, 10.0), Kernel("b", 5.0, 10.0),  # overlap: 0..15
               Kernel("c", 15.0, 1.0),  # touching: 15..16
               Kernel("d", 20.0, 2.0), Kernel("e", 20.5, 0.5)]  # inside: 20..22  # fmt: skip
    assert busy_us(kernels) == pytest.approx(18.0)
    assert busy_us([]) == 0.0


@pytest.mark.parametrize(
    "content, message, incomplete",
    [
        (gzip.compress(json.dumps({"traceEvents": []}).encode()), "no GPU kernel events", False),
        (gzip.compress(json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "x",
                                                    "ts": 1, "dur": 1}]}).encode()),
         "no GPU kernel events (cat 'kernel') in 1 events", False),
        (gzip.compress(b"{}"), "no traceEvents list", False),
        (gzip.compress(b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k"}]}'),
         "a kernel event without name, ts or dur", False),
        (gzip.compress(b"not json"), "not a readable trace (damaged)", False),
        (b"not a trace", "not a readable trace (damaged): not gzip data", False),
        (gzip.compress(json.dumps(synth.trace(2, 1)).encode())[:200],
         "not a readable trace (truncated or still being written)", True),
        (b"", "not a readable trace (truncated or still being written)", True),
    ],
    ids=["empty", "no-kernels", "no-events", "bad-kernel", "bad-json", "not-gzip", "truncated",
         "0-bytes"],
)  # fmt: skip
def test_an_unusable_trace_is_one_line_naming_it(tmp_path, content, message, incomplete):
    path = tmp_path / "decode-c1-x-TP-0.trace.json.gz"
    path.write_bytes(content)
    with pytest.raises(TraceError) as error:
        read_kernels(path)
    text = str(error.value)
    assert text.startswith(f"{path}: ") and message in text and "\n" not in text
    assert error.value.incomplete is incomplete


def test_a_trace_without_a_decode_step_is_refused(tmp_path):
    # Only a prefill pass profiled: no decode attention, no step to divide by.
    trace = synth.trace(0, 2, prefill_after=0)
    path = tmp_path / "t.trace.json"
    path.write_text(json.dumps(trace))
    with pytest.raises(TraceError, match=r"t.trace.json: no decode step \(no _fwd_kernel_stage2"):
        trace_breakdown(path, 2)
    with pytest.raises(ValueError, match="layers must be at least 1"):
        trace_breakdown(synth.write_trace(tmp_path / "d.trace.json", 1, 1), 0)


def test_a_layer_count_that_does_not_divide_gives_fractional_steps(tmp_path):
    # The wrong layer count shows as steps that are not whole: 3 steps x 2 layers read as 4.
    path = synth.write_trace(tmp_path / "t.trace.json.gz", 3, 2)
    assert trace_breakdown(path, 4)["steps"] == pytest.approx(1.5)
