"""This folder's three runs, each level side by side: python3 compare_orders.py [out.csv]."""

import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
RUNS = {"ascending, 1st job": "sglang-fp8-graphs",
        "descending, 2nd job": "sglang-fp8-graphs-descending",
        "ascending, 3rd job": "sglang-fp8-graphs-again"}  # fmt: skip
rows = []
for run, folder in RUNS.items():
    summary = pd.read_csv(HERE / "decode" / folder / "summary.csv")
    windows = pd.read_parquet(HERE / "decode" / folder / "windows.parquet")
    steady = windows[windows.label == "steady"].set_index("concurrency")
    order = [int(c) for c in summary["concurrency"]]
    for _, r in summary.iterrows():
        c = int(r.concurrency)
        rows.append({"run": run, "C": c, "position": order.index(c) + 1,
                     "tpot_ms": r.tpot_ms, "tpot_ci_pct": r.tpot_ci_pct,
                     "output_tok_s": r.output_tok_s, "avg_w": r.avg_w_per_gpu,
                     "j_per_token": r.j_per_token, "temp_c_max": steady.loc[c, "temp_c_max"],
                     "sm_clock_mhz": steady.loc[c, "sm_clock_mhz"], "steady_s": r.steady_s,
                     "valid": r.valid})  # fmt: skip
table = pd.DataFrame(rows).sort_values(["C", "position"])
base = table[table.run == "ascending, 3rd job"].set_index("C")
for column in ("tpot_ms", "avg_w", "j_per_token"):
    table[f"{column}_vs_3rd"] = table[column] / table["C"].map(base[column])
table["temp_vs_3rd_c"] = table["temp_c_max"] - table["C"].map(base["temp_c_max"])
table.to_csv(sys.argv[1] if len(sys.argv) > 1 else sys.stdout, index=False,
             float_format="%.5g")  # fmt: skip
