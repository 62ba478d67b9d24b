"""Version numbers: the package version and the wire protocol version.

Owns the two numbers only. The protocol version changes whenever the encoding of any message or
of the histogram changes; both sides refuse a peer whose protocol version differs.
"""

__version__ = "0.1.0"
PROTOCOL_VERSION = 12
