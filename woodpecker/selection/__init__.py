"""Selection: which kernel runs each node (Woodpecker-DL §2.5, system-level exploration).

Per node the tuned kernels' finalists are checked and timed against the library engines
(`per_node.py`, `finalists.py`); each task's finalist is then chosen inside whole plans
(`in_plan.py`), and the winners are confirmed on the whole plan (`refine.py`). Plans to time
are built through assembly/ with the compile's `AssemblyOptions`.
"""
