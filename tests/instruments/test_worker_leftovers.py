"""A sweep or kernel-power point that leaves GPU memory allocated once it has returned: a
collection frees what a reference cycle held, and what stays is said in the log (on an 80-GB
H100 earlier MoE points' weights crowded out the next ones, 2026-12-06)."""

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


def test_a_cycle_a_point_left_behind_is_collected(capsys):
    held = []
    measurer = _measurer(held)
    with measurer.leftovers(POINT):
        weights = Weights()
        weights.itself = weights  # a cycle: only a collection frees it
        held.append(weakref.ref(weights))
        del weights
    assert held[0]() is None
    assert "left 2.0 GiB allocated; 0.0 GiB after a garbage collection" in capsys.readouterr().err


def test_what_a_collection_cannot_free_is_said(capsys):
    held, kept = [], Weights()
    measurer = _measurer(held)
    with measurer.leftovers(POINT):
        held.append(weakref.ref(kept))  # a library's cache, say
    assert "triton fused_moe fp8_e4m3 M=1 left 2.0 GiB allocated; 2.0 GiB after" in (
        capsys.readouterr().err
    )


def test_a_point_that_frees_its_memory_costs_no_collection(monkeypatch):
    import gc

    monkeypatch.setattr(gc, "collect", lambda: (_ for _ in ()).throw(AssertionError))
    measurer = _measurer([])
    with measurer.leftovers(POINT):
        pass
    measurer.device = "cpu"
    measurer.allocated_bytes = Measurer.allocated_bytes.__get__(measurer)
    with measurer.leftovers(POINT):
        pass
