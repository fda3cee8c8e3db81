"""envengineer: MAPF-FrozenLake and the LLM-as-Environment-Engineer training loop."""

__version__ = "0.1.0"
