import os

# Tests run on the CPU and must never need the network.
os.environ.setdefault('JAX_PLATFORMS', 'cpu')
os.environ.setdefault('WANDB_MODE', 'disabled')
os.environ.setdefault('MUJOCO_GL', 'egl')
