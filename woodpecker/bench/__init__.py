"""Side-by-side benchmarking of Woodpecker against other runtimes, interleaved in one process."""

from woodpecker.bench.compare import benchmark

__all__ = ["benchmark"]
