"""Inference servers for decode-power runs: engine adapters and the process launcher."""
