"""The sweep stage: every backend's GEMM points timed, aggregated into the sweep table."""
