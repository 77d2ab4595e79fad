"""The Halide engine: generated kernels = an algorithm (what) + a schedule template with named
knobs (how), tuned per task (Woodpecker-DL §2.2; Halide's algorithm/schedule separation)."""
