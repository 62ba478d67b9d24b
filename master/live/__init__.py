"""What a running test shows and takes: the live view, the control socket, edit parsing."""
