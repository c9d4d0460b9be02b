"""The step-model stage's table (results/tables/step_model.csv): one row per variant, C,
routing and step component; its columns with their kinds, registered in
:mod:`studylib.core.table_registry`."""

from __future__ import annotations

from ...core.table_registry import Table, register_tables

STEP_MODEL_KINDS = {
    "variant": "text", "weights": "any", "cuda_graphs": "any", "concurrency": "num",
    "routing": "any", "component": "text", "predicted_us": "num", "measured_us": "num",
    "basis": "any", "missing": "any", "predicted_step_us": "num", "tpot_us": "num",
    "predicted_over_tpot": "num", "predicted_w": "num", "predicted_j_per_token": "num",
    "j_per_token": "num", "j_per_token_ratio": "num", "hbm_floor_us": "num",
    "measured_basis": "any", "profile_context": "any", "profile_step_us": "num",
}  # fmt: skip
#: The step-model table's columns, in the order its writer puts them.
COLUMNS = list(STEP_MODEL_KINDS)

STEP_MODEL_TABLE = Table("step_model", "the step-model table", "results/tables/step_model.csv",
                         STEP_MODEL_KINDS)  # fmt: skip
register_tables(STEP_MODEL_TABLE)
