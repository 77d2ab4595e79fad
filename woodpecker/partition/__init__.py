"""Graph partitioning (AGO §IV): which operators are tuned together as one subgraph.

`weights.py`: the operator weight of AGO Eq. (1), in measurements of tuning effort;
`ago.py`: topological stages, affix sets and the acyclic weighted clustering of Algorithm 1,
with the partition statistics AGO reports. Reads the IR only; the tuner and the plan use what
it decides.
"""
