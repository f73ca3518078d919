"""Partitioning a joint forward/backward graph into ``forward`` and ``backward`` graphs."""
