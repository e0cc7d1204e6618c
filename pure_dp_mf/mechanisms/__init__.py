"""The pure-DP mechanisms as decoders and their costs: the ◇α lift (``lift``, Arkhipov &
Kalinin section 2), the tree baselines (``trees``), the 0/1 lower bounds (``lower_bounds``), and
the planner that ranks them for a horizon (``planner``)."""
