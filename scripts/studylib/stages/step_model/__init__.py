"""The step-model stage: a decode step predicted from the sweep, against the server."""
