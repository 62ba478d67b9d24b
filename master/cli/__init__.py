"""The command line: parse into options, call the command, map the result to an exit code."""
