"""Secondary indexes of hash buckets: declarations, maintenance, the planner, states and the TTL sweeper."""
