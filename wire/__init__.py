"""What the server and the attnlab client share, so that neither imports the other: the arrays wire format
(wire/arrays.py: its writer and its reader, NumPy only) and the standalone export (wire/standalone.py, which
inlines the page's own modules with wire/jsbundle.py). wire imports neither server, engine nor attnlab."""
