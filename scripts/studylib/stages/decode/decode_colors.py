"""One colour per decode server variant, the same in every decode chart (throughput, latency,
energy, per-expert M, step model) and in every report: a fixed function of the variant's
name, never of which other variants a chart happens to hold.

The study names its variants ``<engine>-<weights>-<graphs|eager>[-<parallel>...]``: the
weights pick a hue family (BF16 blue, FP8 orange, FP4 green, others purple and grey), the
rest of the name (TP, EP, other suffixes) a hue within it, and CUDA graphs its shade (dark:
graphs on, light: off), so that a graphs-on/off pair reads as one hue.
"""

from __future__ import annotations

import zlib

import altair as alt

#: Per weight type: (graphs on, graphs off) colour pairs; the first for the plain variant.
HUES: dict[str, tuple[tuple[str, str], ...]] = {
    "bf16": (("#1f5fa8", "#8fbbe6"), ("#3b3b98", "#a9a9de"), ("#0f7c8c", "#87cdd6"),
             ("#4a6fa5", "#b3c6e0"), ("#2c4a6e", "#93a9c4")),
    "fp8": (("#d45500", "#f7b27a"), ("#b2182b", "#f09aa5"), ("#8c510a", "#d8b77a"),
            ("#b8860b", "#e6cf8a"), ("#c2185b", "#f3a6c4")),
    "fp4": (("#2a8a3e", "#9ad39a"), ("#4d7a00", "#b8d67a"), ("#00796b", "#80cbc4"),
            ("#33691e", "#a5c48f"), ("#1b5e20", "#8fbf92")),
    "": (("#6a51a3", "#bcb1dc"), ("#555555", "#b5b5b5"), ("#c51b7d", "#f1b6da"),
         ("#7f6000", "#d9c27a"), ("#00695c", "#7fbfb5")),
}  # fmt: skip
#: Name parts -> the weight type whose hues they take.
WEIGHT_TOKENS = {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8", "fp4": "fp4", "nvfp4": "fp4",
                 "mxfp4": "fp4"}  # fmt: skip
#: Name parts that pick a hue within the family, in order (others shift it by a checksum).
PARALLEL_TOKENS = ("", "tp2", "ep2")
GRAPHS_OFF_TOKENS = ("eager", "nographs")
#: Name parts that say nothing about the colour (the default engine, graphs on).
NEUTRAL_TOKENS = ("sglang", "graphs")


def variant_color(variant: str) -> str:
    """The colour of one variant (see the module's docstring)."""
    tokens = str(variant).lower().split("-")
    weights = next((WEIGHT_TOKENS[t] for t in tokens if t in WEIGHT_TOKENS), "")
    off = any(t in GRAPHS_OFF_TOKENS for t in tokens)
    rest = "-".join(t for t in tokens if t not in WEIGHT_TOKENS and t not in NEUTRAL_TOKENS
                    and t not in GRAPHS_OFF_TOKENS)  # fmt: skip
    family = HUES[weights]
    parallel = next((p for p in PARALLEL_TOKENS[1:] if p in rest.split("-")), "")
    index = PARALLEL_TOKENS.index(parallel)
    extra = "-".join(t for t in rest.split("-") if t and t != parallel)
    if extra:  # any other name: a hue past the parallel ones, picked by a checksum (crc32:
        # the same in every process), so it never takes a plain, TP2 or EP2 variant's
        spare = len(family) - len(PARALLEL_TOKENS)
        index = len(PARALLEL_TOKENS) + zlib.crc32(extra.encode()) % spare
    return family[index][1 if off else 0]


def variant_scale(variants) -> alt.Scale:
    """The colour scale of these variants (sorted), each in its own :func:`variant_color`."""
    names = sorted({str(v) for v in variants})
    return alt.Scale(domain=names, range=[variant_color(v) for v in names])
