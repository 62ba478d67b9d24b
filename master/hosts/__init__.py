"""Reaching the test hosts: transports, the host session, the slave zipapp and its compiled loop."""
