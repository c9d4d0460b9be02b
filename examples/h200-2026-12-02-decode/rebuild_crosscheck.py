# Session 12: rebuild the run's crosscheck.csv with this commit's columns from its own files.
import gzip
import json
import math
import re
import sys
from datetime import datetime
from pathlib import Path

sys.path.insert(0, "scripts")
import pandas as pd
from studylib.core.io import write_frame
from studylib.instruments.serving.decode_load import STEADY_FRACTION
from studylib.instruments.serving.server_log import server_window
from studylib.stages.decode.decode_crosscheck import ratios
from studylib.stages.decode.decode_schema import CROSSCHECK_COLUMNS

E = Path("examples/h200-2026-12-02-decode/decode/sglang-bf16-graphs")
log = gzip.open(E / "server.log.gz", "rt").read()
summary = pd.read_csv(E / "summary.csv").set_index("concurrency")
old = pd.read_csv(E / "crosscheck.csv")


def t(s):
    return datetime.strptime(s, "%Y-%m-%d %H:%M:%S,%f").timestamp()


# When each bench_serving run ended (the job log), and so when the next began.
ends = {
    1: "2026-12-02 00:03:03,963",
    16: "2026-12-02 00:03:44,703",
    64: "2026-12-02 00:04:32,168",
    256: "2026-12-02 00:05:22,393",
    512: "2026-12-02 00:06:23,508",
}
start = t("2026-12-02 00:02:22,555")
rows = []
for _, r in old.iterrows():
    c = int(r["concurrency"])
    row = r.to_dict()
    end = t(ends[c])
    res = json.loads((E / "crosscheck" / f"bench_c{c}.jsonl").read_text().splitlines()[-1])
    row["bench_itl_ms"] = res["median_itl_ms"]
    row["server_tok_s"] = summary.loc[c, "server_tok_s"]
    # The live pass starts its span after draining the last load's cancelled requests; from
    # the job log's times, lines running more than C are that drain's, not bench_serving's.
    mine = "\n".join(
        ln
        for ln in log.splitlines()
        if not (m := re.search(r"#running-req: (\d+)", ln)) or int(m[1]) <= c
    )
    row["bench_server_tok_s"] = server_window(mine, start, end, math.ceil(STEADY_FRACTION * c))[
        "server_tok_s"
    ]
    row.update(ratios(row))
    rows.append(row)
    start = end
out = pd.DataFrame(rows).reindex(columns=CROSSCHECK_COLUMNS)
write_frame(out, E / "crosscheck.csv")
print(
    out[
        [
            "concurrency",
            "tpot_ms",
            "bench_tpot_ms",
            "bench_itl_ms",
            "tpot_ratio",
            "itl_ratio",
            "server_tok_s",
            "bench_server_tok_s",
            "engine_ratio",
            "output_tok_s",
            "bench_output_tok_s",
        ]
    ]
    .round(3)
    .to_string()
)
