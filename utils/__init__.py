"""The research library: losses, networks, the goal-conditioned sampler, the fused training step, datasets and
evaluation. It imports nothing of the agents, the run machinery (runtime/) or the entry points."""
