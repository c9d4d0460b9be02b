"""Cost of the power sampler on a GPU box: its CPU share, and its effect on kernel timings.

    python3 tools/sampler_overhead.py [--seconds 10]

1. Runs the sampler (every visible GPU, 20 Hz, GPM on) for --seconds and reports the share of
   one core its thread used (target <= 2 %).
2. Times torch bf16 matmuls (graph replay, the harness's stopping rule) alternately with and
   without the sampler running, three rounds, and reports the median relative difference
   (target < 1 %).
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from studylib.instruments.backends import adapter  # noqa: E402
from studylib.instruments.power_sampler import Sampler, open_readers, visible_nvml_indices  # noqa: E402
from studylib.instruments.timing import CudaTimer, StopRule, sample_until, summarize  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    readers, source, why = open_readers(visible_nvml_indices())
    print(f"power source: {source} {why or ''}; GPUs: {[r.name for r in readers]}")
    # One GPU (the common kernel_power / decode job) and every GPU of the machine.
    for label, chosen in (("one GPU", readers[:1]), (f"{len(readers)} GPUs", readers)):
        sampler = Sampler(chosen, rate_hz=20)
        with sampler:
            time.sleep(args.seconds)
        cpu = 100 * sampler.cpu_fraction()
        counted = sum(1 for s in sampler.samples.values() for x in s if x["energy_mj"] is not None)
        print(
            f"sampler, {label}: {sum(len(s) for s in sampler.samples.values())} samples "
            f"({counted} with the energy counter), GPM supported {sampler.gpm_supported}, "
            f"CPU {cpu:.3f} % of one core over {sampler.wall_s:.1f} s "
            f"({cpu / max(len(chosen), 1):.3f} % per GPU)"
        )
    rule = StopRule(min_samples=50, max_samples=5000, min_time_s=1.0, max_time_s=3.0,
                    rel_noise=0.001)  # fmt: skip
    timer = CudaTimer()
    torch_backend = adapter("torch")
    for m in (16, 4096):
        point = {"op": "matmul", "dtype": "bf16", "impl": "aten", "M": m, "N": 6144, "K": 2048}
        prepared = torch_backend.prepare(point, "cuda")
        for _ in range(10):
            prepared.run()
        graph = timer.capture(prepared.run, 50)

        def replay(graph=graph):
            return timer.replay(graph, 50)

        diffs = []
        for _ in range(3):
            off = summarize(sample_until(replay, rule), "t")["t_us"]
            with Sampler(readers, rate_hz=20):
                on = summarize(sample_until(replay, rule), "t")["t_us"]
            diffs.append((on - off) / off)
            print(f"M={m}: without {off:.3f} us, with sampler {on:.3f} us ({diffs[-1]:+.2%})")
        print(f"M={m}: median difference {statistics.median(diffs):+.2%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
