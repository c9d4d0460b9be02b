"""The instruments below the stages: the backends (one module per library behind one
interface), the worker and its client, the timing harness, the power sampler, NVML, GPU
slots, the hardware record, the measured peaks and the device."""
