"""The training rows of train.csv: each metric averaged over every step since the last row, whatever the chunking.

main.py trains in chunks of --steps_per_call fused updates; each chunk returns its per-step metrics on the device.
`TrainingMetrics` keeps them there until a row is due and then takes one mean over the row's steps, so a row does not
depend on how the steps were chunked (nor on a stop and --resume in between: the steps of a checkpoint's unfinished
row travel in the checkpoint). Per chunk the host reads one flag per seed, whether every metric stayed finite, so that
no non-finite step reaches a checkpoint or a row.
"""

from typing import Dict, List, Optional

import jax
import jax.numpy as jnp
import numpy as np

# The key of a checkpoint's `extra` that holds the per-step metrics of its unfinished row.
PENDING_KEY = 'pending_training_metrics'


@jax.jit
def finite_per_seed(infos):
    """[N] bool: whether every per-step metric of each seed ([N, steps] each) is finite."""
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(v), axis=1) for v in infos.values()]), axis=0)


class TrainingMetrics:
    """Per-step metrics of the steps since the last row (device arrays [N, k] per metric), and of the steps up to the
    evaluation step whose checkpoint a stop may write instead of the current one (runtime/schedule.py)."""

    def __init__(self, start_step: int, pending: Optional[Dict[str, jax.Array]] = None):
        self.chunks: List[Dict[str, jax.Array]] = [pending] if pending else []
        self.step = start_step
        self.at_step = {}  # evaluation step -> the unfinished row's metrics then, for a checkpoint of that step

    @classmethod
    def resumed(cls, start_step: int, extras: List[Dict]):
        """The metrics a resumed run's checkpoints carried (one `extra` per seed), stacked along the seed axis."""
        pending = [extra.get(PENDING_KEY) or {} for extra in extras]
        if not pending[0]:
            return cls(start_step)
        stacked = {name: jnp.asarray(np.stack([np.asarray(p[name], np.float32) for p in pending])) for name in pending[0]}
        return cls(start_step, stacked)

    def add(self, infos: Dict[str, jax.Array]) -> np.ndarray:
        """A chunk's per-step metrics ([N, steps] each, on the device); returns [N] bool, each seed's all finite (the
        one transfer per chunk)."""
        self.chunks.append(infos)
        self.step += next(iter(infos.values())).shape[1]
        return np.asarray(finite_per_seed(infos))

    def pending(self) -> Dict[str, jax.Array]:
        if not self.chunks:
            return {}
        if len(self.chunks) > 1:
            self.chunks = [{name: jnp.concatenate([c[name] for c in self.chunks], axis=1) for name in self.chunks[0]}]
        return self.chunks[0]

    def keep_for_checkpoint(self):
        """Remember the unfinished row as it is now: an evaluation of this step starts, and a stop while it runs saves
        the checkpoint of this step. The evaluation before it may still be running (training waits for it before this
        one starts), so the two latest are kept."""
        self.at_step[self.step] = self.pending()
        self.at_step = {step: self.at_step[step] for step in sorted(self.at_step)[-2:]}

    def row(self) -> List[Dict[str, float]]:
        """Each seed's mean of every metric over the steps since the last row; the next row starts here."""
        means = jax.device_get({name: jnp.mean(v, axis=1) for name, v in self.pending().items()})
        self.chunks = []
        return [{name: float(v[k]) for name, v in means.items()} for k in range(len(next(iter(means.values()))))]

    def checkpoint_extras(self, step: int, num_seeds: int) -> List[Dict]:
        """Each seed's checkpoint `extra` for a checkpoint of `step`: the per-step metrics of its unfinished row."""
        pending = self.pending() if step == self.step else self.at_step.get(step)
        if pending is None:
            raise AssertionError(f'no training metrics kept for a checkpoint of step {step}')
        host = jax.device_get(pending)
        return [{PENDING_KEY: {name: np.asarray(v[k]) for name, v in host.items()}} for k in range(num_seeds)]


def first_nonfinite(infos):
    """(index, metric) of the first step with a non-finite metric in stacked per-step `infos`, or None."""
    bad = [(int(np.flatnonzero(~np.isfinite(v))[0]), key) for key, v in infos.items() if not np.all(np.isfinite(v))]
    return min(bad, default=None)


def nonfinite_error(bad, step: int, seed: int, checkpoint_path: str, largest: Dict[str, float]):
    """The error for a non-finite training metric (`first_nonfinite`'s (index, metric) in the chunk that began at
    `step`). It names the largest magnitudes of the training data (`largest`: {array name: max |value|}), since one
    value far beyond the data's scale (1e30) overflows float32 arithmetic at any learning rate."""
    from runtime.errors import NonFiniteLossError

    scale = ', '.join(f'|{name}| {value:.3g}' for name, value in largest.items())
    return NonFiniteLossError(
        f'Non-finite {bad[1]} at step {step + bad[0] + 1} (seed {seed}): training stopped. The last good checkpoint '
        f'({checkpoint_path}, if any) was kept. --resume would repeat the same steps (and refuses other settings). The '
        f'training data\'s largest values are {scale}: if one is far beyond the data\'s usual scale, fix the data (such '
        f'values overflow float32 arithmetic at any learning rate); otherwise start a new run (another --run_name) '
        f'with a lower --agent.lr or auxiliary weight (alpha).')
