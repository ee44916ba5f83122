"""The research library: losses, networks, the goal-conditioned sampler, the fused training step, datasets and
evaluation. It imports nothing of the agents, the run machinery (runtime/) or the entry points."""

from utils.render_backend import check_before_import

check_before_import()  # before anything imports mujoco (utils/render_backend.py)
