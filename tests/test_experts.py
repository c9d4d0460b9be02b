import math

import pytest
from studylib.serving.experts import expert_m, load_logical_count


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
