"""RLark: run RLinf reinforcement-learning training on real machines.

See ARCHITECTURE.md (vocabulary, module layout, state machine, bootstrap contract).
"""

__version__ = "0.1.0"
