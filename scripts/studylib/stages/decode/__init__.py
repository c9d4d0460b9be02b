"""The decode stage (its code is in ``serving/``, ``findings/decode.py`` and the decode figures
for now): its tables in the registry."""
