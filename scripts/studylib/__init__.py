"""Importable library behind the study's entry scripts (``scripts/*.py``)."""
