"""Shared machinery below the stages: files, the table registry, formats, charts, journals and
progress."""
