"""Counters that run the release on streams: one stream (``continual``, ``counter``), many public
keys (``keyed``), and Apache Spark (``spark``, an optional extra)."""
