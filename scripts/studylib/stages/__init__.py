"""The study's stages, one folder each as the rules are: sweep, kernel_power, decode,
step_model."""
