import math

import pandas as pd
import pytest
from studylib.stages.decode.expert_m import expert_m, load_logical_count


def test_expert_m_against_the_balanced_assumption():
    # 2 layers x 4 experts; C=8 tokens per step, top-2 routing: balanced M = 8*2/4 = 4
    counts = [[10, 10, 10, 10], [40, 0, 0, 0]]
    frame = expert_m(counts, concurrency=8, top_k=2)
    assert set(frame["balanced_m"]) == {4.0}
    layer0 = frame[frame.layer == 0]
    assert layer0["m"].tolist() == [4.0, 4.0, 4.0, 4.0]
    layer1 = frame[frame.layer == 1]
    assert layer1["m"].tolist() == [16.0, 0.0, 0.0, 0.0]  # all tokens to one expert
    assert frame.groupby("layer")["m"].sum().tolist() == [16.0, 16.0]  # C x top_k per layer


def test_empty_layer_is_nan_not_zero():
    frame = expert_m([[0, 0]], concurrency=4, top_k=1)
    assert all(math.isnan(v) for v in frame["m"])


def test_load_from_json_answer_and_from_a_pt_file(tmp_path):
    assert load_logical_count({"logical_count": [[1, 2], [3, 4]]}) == [[1.0, 2.0], [3.0, 4.0]]
    torch = pytest.importorskip("torch")
    path = tmp_path / "record.pt"
    # leading dimension (e.g. buffered passes) is summed away
    torch.save({"logical_count": torch.tensor([[[1, 2], [3, 4]], [[1, 0], [0, 1]]])}, path)
    assert load_logical_count(path) == [[2.0, 2.0], [3.0, 5.0]]


def test_expert_parallel_size_from_each_engines_flags():
    from studylib.stages.decode.decode_schema import expert_parallel

    assert expert_parallel("sglang", ["--tp", 2, "--ep", 2]) == 2
    assert expert_parallel("sglang", ["--tp", "8", "--ep-size=8"]) == 8
    assert expert_parallel("sglang", ["--expert-parallel-size", "4"]) == 4
    assert expert_parallel("sglang", ["--tp", "2"]) == 1  # tensor parallel only
    assert expert_parallel("vllm", ["--tensor-parallel-size", "8", "--enable-expert-parallel"]) == 8
    assert expert_parallel("vllm", ["--tensor-parallel-size", "8"]) == 1
    assert expert_parallel("transformers", ["--device", "cuda"]) is None


def test_rank_loads_from_expert_ownership():
    from studylib.stages.decode.expert_m import RANK_LOAD_COLUMNS, rank_loads

    # 8 experts over EP 2: rank 0 holds experts 0-3, rank 1 holds 4-7. Layer 0: 30 of 40
    # tokens land on rank 0's experts (1.5x the balanced half); layer 1 is balanced.
    rows = []
    for layer, counts in ((0, [10, 10, 5, 5, 2, 3, 3, 2]), (1, [5] * 8)):
        for expert, tokens in enumerate(counts):
            rows.append({"variant": "ep2", "concurrency": 4, "layer": layer, "expert": expert,
                         "tokens": tokens})  # fmt: skip
    em = pd.DataFrame(rows)
    loads = rank_loads(pd.concat([em, em.assign(variant="tp2")]), {"ep2": 2, "tp2": 1})
    assert list(loads.columns) == RANK_LOAD_COLUMNS and set(loads["variant"]) == {"ep2"}
    layer0 = loads[loads["layer"] == 0].set_index("rank")
    assert layer0.loc[0, "tokens"] == 30 and layer0.loc[1, "tokens"] == 10
    assert layer0.loc[0, "over_balanced"] == pytest.approx(1.5)
    assert (loads[loads["layer"] == 1]["over_balanced"] == 1.0).all()
    assert rank_loads(pd.DataFrame(columns=["variant"]), {}).empty
