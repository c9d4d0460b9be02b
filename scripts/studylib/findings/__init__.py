"""The findings of the decode stage (``decode.py``: question 5, the pairs and validity rules)
and of the per-expert M (``experts.py``: question 4); the other questions' findings live in
their stages, all of them listed in :mod:`studylib.study_answers`."""
