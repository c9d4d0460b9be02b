# Session 12: crosscheck.csv rebuilt with this commit's columns from the run's own files (the
# run wrote an earlier set): bench_serving's median ITL (its JSON results), and the
# scheduler's median tok/s (SGLang's decode log lines) over the study's steady window and over
# bench_serving's run, their spans from the job log's times (logs/sglang-bf16-graphs.log).
#   .venv/bin/python examples/h200-2026-12-02-decode/rebuild_crosscheck.py
import gzip
import json
import math
import sys
from datetime import datetime
from pathlib import Path

sys.path.insert(0, "scripts")
import pandas as pd  # noqa: E402
from studylib.core.io import write_frame  # noqa: E402
from studylib.instruments.serving.decode_load import STEADY_FRACTION  # noqa: E402
from studylib.instruments.serving.server_log import server_window  # noqa: E402
from studylib.stages.decode.decode_crosscheck import ratios  # noqa: E402
from studylib.stages.decode.decode_schema import CROSSCHECK_COLUMNS  # noqa: E402

E = Path("examples/h200-2026-12-02-decode/decode/sglang-bf16-graphs")
log = gzip.open(E / "server.log.gz", "rt").read()
old = pd.read_csv(E / "crosscheck.csv")
STEADY_S = 15.0  # run.yaml's min_steady_s


def t(hms: str) -> float:
    return datetime.strptime(f"2026-12-02 {hms}", "%Y-%m-%d %H:%M:%S,%f").timestamp()


# When each C's main-pass window ended and each bench_serving run ended (the job log).
study_end = {1: "00:01:08,424", 16: "00:01:25,476", 64: "00:01:43,186", 256: "00:02:01,749",
             512: "00:02:22,555"}  # fmt: skip
bench_end = {1: "00:03:03,963", 16: "00:03:44,703", 64: "00:04:32,168", 256: "00:05:22,393",
             512: "00:06:23,508"}  # fmt: skip
start = t(study_end[512])
rows = []
for _, r in old.iterrows():
    c = int(r["concurrency"])
    row = {k: v for k, v in r.to_dict().items() if k in CROSSCHECK_COLUMNS}
    res = json.loads((E / "crosscheck" / f"bench_c{c}.jsonl").read_text().splitlines()[-1])
    row["bench_itl_ms"] = res["median_itl_ms"]
    steady = math.ceil(STEADY_FRACTION * c)
    s1 = t(study_end[c])
    row["server_tok_s_median"] = server_window(log, s1 - STEADY_S, s1, steady, c)[
        "server_tok_s_median"
    ]
    end = t(bench_end[c])
    # Lines running more than C are the previous load's leftovers, drained before the run.
    row["bench_server_tok_s_median"] = server_window(log, start, end, steady, c)[
        "server_tok_s_median"
    ]
    row.update(ratios(row))
    rows.append(row)
    start = end
out = pd.DataFrame(rows).reindex(columns=CROSSCHECK_COLUMNS)
write_frame(out, E / "crosscheck.csv")
shown = ["concurrency", "tpot_ms", "bench_tpot_ms", "bench_itl_ms", "tpot_ratio", "itl_ratio",
         "server_tok_s_median", "bench_server_tok_s_median", "engine_ratio"]  # fmt: skip
print(out[shown].round(3).to_string())
