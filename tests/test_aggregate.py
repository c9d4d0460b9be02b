import pandas as pd
from studylib.aggregate import aggregate, support_matrix
from studylib.sweep import to_frame


def rows(backend, impl, statuses, error="boom"):
    return [
        {"backend": backend, "impl": impl, "op": "mm", "dtype": "bf16", "shape": "s",
         "M": m, "N": 8, "K": 8, "G": None, "status": s, "error": "" if s == "ok" else error,
         "eager_us": 1.0 if s == "ok" else None}
        for m, s in enumerate(statuses, start=1)
    ]  # fmt: skip


def test_support_verdicts_and_reasons():
    frame = to_frame(
        rows("a", "x", ["ok", "ok"])
        + rows("a", "y", ["ok", "error"])
        + rows("b", "z", ["unsupported", "unsupported"], error="no CUDA device")
        + rows("b", "w", ["error", "error", "unsupported"])
    )
    support = support_matrix(frame).set_index(["backend", "impl"])
    assert support.loc[("a", "x"), "status"] == "ok"
    assert support.loc[("a", "x"), "reason"] == ""
    assert support.loc[("a", "y"), "status"] == "partial"
    assert support.loc[("b", "z"), "status"] == "unsupported"
    assert support.loc[("b", "z"), "reason"] == "no CUDA device"
    assert support.loc[("b", "w"), "status"] == "error"
    assert support.loc[("b", "w"), ["error", "unsupported", "points"]].tolist() == [2, 1, 3]


def test_aggregate_concatenates_and_writes(tmp_path):
    paths = []
    for backend in ("a", "b"):
        path = tmp_path / f"{backend}.parquet"
        to_frame(rows(backend, "x", ["ok", "unsupported"])).to_parquet(path)
        paths.append(path)
    aggregate(paths, tmp_path / "sweep.csv", tmp_path / "support.csv")
    sweep = pd.read_csv(tmp_path / "sweep.csv")
    assert list(sweep.columns[:11]) == [
        "backend", "impl", "op", "dtype", "shape", "M", "N", "K", "G", "status", "error"
    ]  # fmt: skip
    assert len(sweep) == 4
    assert set(pd.read_csv(tmp_path / "support.csv")["status"]) == {"partial"}
