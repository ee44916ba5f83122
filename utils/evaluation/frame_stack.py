"""Frame-stacked acting, as the training sampler stacks frames."""

import numpy as np


class FrameStackPolicy:
    """`policy_fn` on frame-stacked inputs: each step it sees the channel-wise stack of the last `frame_stack`
    observations of every episode (the first observation repeated at an episode's start, as the training sampler
    stacks frames before an episode's first row) and the goal repeated `frame_stack` times. The evaluation resets it
    whenever episodes start."""

    def __init__(self, policy_fn, frame_stack: int):
        self.policy_fn, self.frame_stack = policy_fn, frame_stack
        self.reset()

    def reset(self):
        self.history = None
        if hasattr(self.policy_fn, 'reset'):
            self.policy_fn.reset()

    def __call__(self, observations, goals):
        current = np.array(observations)  # a copy: the evaluator updates its observation buffer in place
        if self.history is None:
            self.history = [current] * self.frame_stack
        else:
            self.history = self.history[1:] + [current]
        stacked_goals = np.concatenate([np.asarray(goals)] * self.frame_stack, axis=-1)
        return self.policy_fn(np.concatenate(self.history, axis=-1), stacked_goals)
