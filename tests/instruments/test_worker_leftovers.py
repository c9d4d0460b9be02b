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
    measurer.uncollectable = 0
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


def test_what_a_collection_could_not_free_is_said_once_and_not_collected_again(monkeypatch,
                                                                               capsys):  # fmt: skip
    """A library's buffer that outlives every point (30.0 GiB from SGLang's first fused-MoE
    point on, an H100, 2026-12-06) is one line, not one per point, and costs one collection:
    collecting before each of 683 points cost the FlashInfer sweep 20 s."""
    kept = Weights()
    measurer = _measurer([weakref.ref(kept)])
    measurer.collect_leftovers(POINT)
    assert capsys.readouterr().err.count("still allocated") == 1
    monkeypatch.setattr(gc, "collect", lambda: (_ for _ in ()).throw(AssertionError))
    for _ in range(3):
        measurer.collect_leftovers(POINT)
    assert capsys.readouterr().err == ""


def test_more_held_beyond_the_floor_is_collected_again(capsys):
    kept, more = Weights(), Weights()
    refs = [weakref.ref(kept)]
    measurer = _measurer(refs)
    measurer.collect_leftovers(POINT)  # 2 GiB the floor
    refs.append(weakref.ref(more))  # 2 GiB more: past the floor by more than LEFTOVER_BYTES
    measurer.collect_leftovers(POINT)
    assert "4.0 GiB still allocated before" in capsys.readouterr().err.splitlines()[-1]


def test_a_floor_let_go_is_lowered(capsys):
    kept = Weights()
    refs = [weakref.ref(kept)]
    measurer = _measurer(refs)
    measurer.collect_leftovers(POINT)
    refs.clear()  # the library let its buffer go: nothing held
    measurer.collect_leftovers(POINT)
    assert measurer.uncollectable == 0
    refs.append(weakref.ref(kept))  # held again: past the lowered floor, said again
    measurer.collect_leftovers(POINT)
    assert capsys.readouterr().err.count("still allocated") == 2
