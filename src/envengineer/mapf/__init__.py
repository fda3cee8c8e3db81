"""MAPF-FrozenLake: the testbed. Imports nothing from torch or transformers."""
