"""Static analyses of a graph that report on it without changing it."""
