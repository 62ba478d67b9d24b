"""Pure computations on results: rollups and their kernels, measure, DFC, verdicts, devices."""
