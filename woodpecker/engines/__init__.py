"""Engines: what can run a node (capabilities) and how (kernels), one module per engine;
`registry.py` is the one place that names them all."""
