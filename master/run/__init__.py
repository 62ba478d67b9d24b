"""One run of a test: lifecycle, the step loop, operator requests, the settings in force,
workloads."""
