"""The run folder: writers, the folder reader, state.json, summary.json, report, compare."""
