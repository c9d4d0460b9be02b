"""Shared machinery below the stages: files and hashes (io), the table registry and its
checked readers (table_registry), number and column formats (formats), the config
(config), journals of finished work (journal), progress lines (progress), the chart kit
(charts), the answer rows (answer_records) and the one rule that decides their verdicts
(verdicts), the cell readers, sentence formats and machine description the answers are
written with (finding_records) and the report's cells (report_cells)."""
