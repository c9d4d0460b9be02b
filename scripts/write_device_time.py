# ruff: noqa: F821 - Snakemake passes `snakemake` to the script
"""Snakemake entry: each measuring job's wall time and its time inside measurement ->
results/tables/device_time.csv (studylib/device_time.py)."""

from studylib import quiet_interrupt  # noqa: F401 - first: Ctrl-C ends the job quietly

# isort: split
from pathlib import Path

from studylib.core.io import write_frame
from studylib.device_time import TOTAL, device_time
from studylib.snakemake_job import setup_logging

log = setup_logging(snakemake)
files = snakemake.input


def job_name(benchmark: str) -> str:
    """A job's name in the table: its benchmark file's path under results/benchmarks."""
    return str(Path(benchmark).relative_to("results/benchmarks").with_suffix(""))


benchmarks = {job_name(p): p for p in [*files.benchmarks, *files.build_benchmarks]}
decode = {}  # variant -> its files, in device_time.DECODE_FILES' order (rule device_time)
for path in files.decode:
    decode.setdefault(Path(path).parent.name, []).append(path)
table = device_time(
    sweeps={Path(p).stem: p for p in files.sweeps},
    kernel_power={Path(p).stem: p for p in files.power},
    decode={variant: tuple(paths) for variant, paths in decode.items()},
    benchmarks=benchmarks,
    # the JIT builds' records, each named as its benchmark file (rule device_time's inputs)
    builds={job_name(b): record
            for record, b in zip(files.builds, files.build_benchmarks, strict=True)},
)  # fmt: skip
write_frame(table, snakemake.output[0])
total = table[table["job"] == TOTAL].iloc[0]
log.info("%s: %.0f of %.0f s inside measurement", TOTAL, total["measuring_s"] or 0,
         total["wall_s"] or 0)  # fmt: skip
