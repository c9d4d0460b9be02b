"""The kernel-power stage: sustained kernel loops under the power sampler."""
