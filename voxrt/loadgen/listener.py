"""The simulated listener: defined beside the scheduler (`voxrt/engine/sched/listener.py`), which its
simulation shares with the load generator; re-exported here for the load generator's modules."""

from voxrt.engine.sched.listener import Listener, llm_tokens

__all__ = ["Listener", "llm_tokens"]
