"""The step model's targets (issue 16): how close a prediction must come to the server's
measurement to explain it. Question 6's answers judge against them (with the measurement's
noise: :func:`studylib.core.verdicts.within_tolerance`)."""

#: Predicted TPOT within this share of measured; the target holds at C ≥ STEP_MIN_C with
#: CUDA graphs on (below, and without graphs, the host's part is not modelled to this).
TPOT_TOLERANCE = 0.20
STEP_MIN_C = 16
#: A predicted component within this share of the profiler's.
COMPONENT_TOLERANCE = 0.25
#: Predicted J/token within this share of measured.
ENERGY_TOLERANCE = 0.25
#: The predicted host time within this share of the graphs-off gap in TPOT.
GAP_TOLERANCE = 0.25
