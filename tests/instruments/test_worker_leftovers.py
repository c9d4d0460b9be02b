"""GPU memory still allocated when a sweep or kernel-power point begins (nothing of an earlier
point should be): a collection frees what a reference cycle held, and the log says what it
freed (on an 80-GB H100 earlier MoE points' weights crowded out the next ones, 2026-12-06)."""

import gc
import weakref

from studylib.instruments.worker import LEFTOVER_BYTES, Measurer

POINT = {"impl": "triton", "op": "fused_moe", "dtype": "fp8_e4m3", "M": 1}


class Weights:
    pass


def _measurer(held: list) -> Measurer:
    measurer = Measurer.__new__(Measurer)  # no backend: only the memory account is used
    measurer.device = "cuda"
    measurer.allocated_bytes = lambda: sum(2 * LEFTOVER_BYTES for ref in held if ref())
    return measurer


def test_an_earlier_points_cycle_is_collected_before_the_next(capsys):
    gc.disable()  # no automatic collection may free it first: only the worker's
    try:
        weights = Weights()
        weights.itself = weights  # a cycle: only a collection frees it
        held = [weakref.ref(weights)]
        del weights
        _measurer(held).collect_leftovers(POINT)
    finally:
        gc.enable()
    assert held[0]() is None
    assert "2.0 GiB still allocated before triton fused_moe fp8_e4m3 M=1; 0.0 GiB after" in (
        capsys.readouterr().err
    )


def test_what_a_collection_cannot_free_is_said(capsys):
    kept = Weights()  # a library's cache, say
    _measurer([weakref.ref(kept)]).collect_leftovers(POINT)
    assert "2.0 GiB still allocated before triton fused_moe fp8_e4m3 M=1; 2.0 GiB after" in (
        capsys.readouterr().err
    )


def test_nothing_held_costs_no_collection(monkeypatch, capsys):
    monkeypatch.setattr(gc, "collect", lambda: (_ for _ in ()).throw(AssertionError))
    measurer = _measurer([])
    measurer.collect_leftovers(POINT)
    measurer.device = "cpu"
    measurer.allocated_bytes = Measurer.allocated_bytes.__get__(measurer)
    measurer.collect_leftovers(POINT)
    assert capsys.readouterr().err == ""
