# Session 14: crosscheck.csv's steady TPOT recomputed on the CPU from bench_serving's own
# per-request results of the run (decode/sglang-bf16-graphs/crosscheck/bench_c{C}.jsonl.gz) by
# the commit after the run (bench_steady.first_wave_admitted: a straggler of bench_serving's
# first wave no longer holds its window back). Every other column is the run's. The run wrote
# 35.061 ms (ratio 0.938) at C = 512; the other C read the same either way.
#   .venv/bin/python examples/h200-2026-12-02-paired/rebuild_crosscheck.py
import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, "scripts")
import pandas as pd  # noqa: E402
from studylib.core.io import write_frame  # noqa: E402
from studylib.instruments.serving.bench_steady import bench_steady_tpot_ms  # noqa: E402
from studylib.stages.decode.decode_crosscheck import ratios  # noqa: E402
from studylib.stages.decode.decode_schema import CROSSCHECK_COLUMNS  # noqa: E402

E = Path("examples/h200-2026-12-02-paired/decode/sglang-bf16-graphs")
OUTPUT_LEN = 1024  # run.yaml's decode.output_len on a GPU (the default)
table = pd.read_csv(E / "crosscheck.csv")
steady_s = pd.read_csv(E / "summary.csv").set_index("concurrency")["steady_s"]
rows = []
for row in table.to_dict("records"):
    c = int(row["concurrency"])
    lines = gzip.open(E / "crosscheck" / f"bench_c{c}.jsonl.gz", "rt").read().splitlines()
    details = json.loads(lines[-1])
    row["bench_tpot_steady_ms"] = bench_steady_tpot_ms(details, c, OUTPUT_LEN, steady_s[c])
    row.update(ratios(row))
    rows.append(row)
frame = pd.DataFrame(rows).reindex(columns=CROSSCHECK_COLUMNS)
write_frame(frame, E / "crosscheck.csv", "decode sglang-bf16-graphs (rebuilt: steady TPOT)")
print(frame[["concurrency", "tpot_ms", "bench_tpot_steady_ms", "tpot_ratio_steady"]])
