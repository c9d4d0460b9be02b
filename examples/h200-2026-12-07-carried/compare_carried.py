"""This folder's two jobs, each level side by side: python3 compare_carried.py [out.csv]."""

import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
RUNS = {"separate, 1st job": "sglang-fp8-graphs",
        "carried, 2nd job": "sglang-fp8-graphs-carried"}  # fmt: skip
rows = []
for run, folder in RUNS.items():
    summary = pd.read_csv(HERE / "decode" / folder / "summary.csv", comment="#")
    windows = pd.read_parquet(HERE / "decode" / folder / "windows.parquet")
    steady = windows[windows.label == "steady"].set_index("concurrency")
    wait = windows[windows.label == "warmup"].set_index("concurrency")
    for _, r in summary.iterrows():
        c = int(r.concurrency)
        rows.append({"run": run, "C": c, "load": r.load, "wait_s": wait.loc[c, "seconds"],
                     "tpot_ms": r.tpot_ms, "tpot_ci_pct": r.tpot_ci_pct,
                     "output_tok_s": r.output_tok_s, "server_tok_s": r.server_tok_s,
                     "server_drift": r.server_drift, "avg_w": r.avg_w_per_gpu,
                     "j_per_token": r.j_per_token, "temp_c_max": steady.loc[c, "temp_c_max"],
                     "sm_clock_mhz": steady.loc[c, "sm_clock_mhz"], "steady_s": r.steady_s,
                     "valid": r.valid})  # fmt: skip
table = pd.DataFrame(rows).sort_values(["C", "run"], ascending=[True, False])
base = table[table.run == "separate, 1st job"].set_index("C")
for column in ("tpot_ms", "server_tok_s", "avg_w", "j_per_token"):
    table[f"{column}_vs_separate"] = table[column] / table["C"].map(base[column])
table["temp_vs_separate_c"] = table["temp_c_max"] - table["C"].map(base["temp_c_max"])
table.to_csv(sys.argv[1] if len(sys.argv) > 1 else sys.stdout, index=False,
             float_format="%.5g")  # fmt: skip
