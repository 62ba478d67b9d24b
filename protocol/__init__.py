"""The contract master and slave share: bucket ladder, histograms, statistics, messages, codec.

Pure: no I/O, no threads, no clocks. Imports only the standard library, numpy and msgpack.
"""
