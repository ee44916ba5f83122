"""How a trained agent acts when it is evaluated (no JAX here: evaluation worker processes import it).

Evaluation acts with the policy's mean action, temperature 0, as OGBench evaluates. Every evaluation path (flat
agents, vmapped seeds, a hierarchy's re-planning policy) reads this one value.
"""

EVALUATION_TEMPERATURE = 0.0
