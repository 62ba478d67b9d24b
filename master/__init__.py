"""Runs on the controller: config, transports, run loop, rollups, measure, DFC, output, CLI."""
