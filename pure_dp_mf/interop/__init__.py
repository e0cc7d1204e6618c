"""Bridges to other differential-privacy libraries (optional extras): ``opendp`` (the ``opendp`` extra)."""
