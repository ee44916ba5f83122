"""The training loop, and the goal-conditioned batches it draws on the device (docs/method.md, section 3).

    train(agent, data, data_keys, start_step, num_steps)
        `num_steps` updates in one jitted call (lax.scan): each samples a batch from the dataset on the device and
        updates the agent; vmapped over seeds when `data_keys` carry a seed axis (N agents stacked by `stack_trees`)

The dataset lives on the device as a `DeviceDataset`; every random choice is a `jax.random` draw, so a whole training
step -- sample, update -- is one XLA program with no host round-trip. Rows are states; row `i` is sampled only if
it has a successor in its episode (`i < T`, where `T = episode_end[i]` is the episode's last row, itself a real
state). Goals are drawn as OGBench's GCDataset draws them from its compact datasets (`goal_rule='ogbench'`): a
trajectory goal is at most `T - 1`, the last row with a successor, so the file's final row is only ever a next
state; `goal_rule='last_row'` lets goals reach `T` (docs/method.md, section 3). What a batch holds is declared by the
agent's class (`BATCH`, a `BatchSpec`) and set by its config (`SamplerConfig.for_agent`).

The sampling key of step t is fold_in(data_key, t): a run's batches depend only on its seed and the step number, so
fusing K updates per call, or resuming at any step, replays the same batches. Every seed's numbers in a vmapped call
are those of a single-seed call with that seed.
"""

import dataclasses
import functools
from typing import Callable, Dict, Optional, Tuple

import flax
import jax
import jax.numpy as jnp
import numpy as np

from utils.pixel_batches import AUGMENT_STREAM, augment_batch, stacked_observations


class DeviceDataset(flax.struct.PyTreeNode):
    observations: jax.Array  # [N, *obs_shape], every row of every episode
    actions: jax.Array  # [N, action_dim]; the action of an episode's last row is never used
    episode_end: jax.Array  # [N] int32, index of the last row of the row's episode
    sample_idxs: jax.Array  # [M] int32, rows that have a next state (i < episode_end[i])

    @classmethod
    def from_numpy(cls, observations: np.ndarray, actions: np.ndarray, terminals: np.ndarray):
        """Build from OGBench's raw file layout (terminal = 1 on the last row of each episode)."""
        terminals = np.asarray(terminals).astype(bool)
        ends = np.nonzero(terminals)[0]
        episode_id = np.searchsorted(ends, np.arange(len(terminals)))
        episode_end = ends[episode_id].astype(np.int32)
        sample_idxs = np.nonzero(~terminals)[0].astype(np.int32)
        # device_put, not jnp.asarray: the same arrays and dtypes, copied to the device without compiling a copy
        # program per array shape (~6 ms each at start-up).
        return cls(**jax.device_put(dict(observations=observations, actions=actions, episode_end=episode_end,
                                         sample_idxs=sample_idxs)))

    @property
    def size(self) -> int:
        return self.observations.shape[0]


@dataclasses.dataclass(frozen=True)
class GoalMixture:
    """Where a goal comes from: current state, the same trajectory's future, or a random state. The trajectory part
    is geometric (`k ~ Geometric(1 - gamma)`) when `geom_sample`, else uniform over the rest of the trajectory.
    Every value is checked with the config (`utils.config_checks.validate_config`)."""

    p_curgoal: float = 0.0
    p_trajgoal: float = 1.0
    p_randomgoal: float = 0.0
    geom_sample: bool = False


# A goal mixture `<name>` of an agent's config is its fields `<name>_p_curgoal`, ...: 'actor' goals for the
# behavior-cloning loss, 'value' goals for the loss that needs a second goal (each agent says what for, in its
# BatchSpec), 'high' goals for a hierarchy's high level.
MIXTURE_FIELDS = ('p_curgoal', 'p_trajgoal', 'p_randomgoal', 'geom_sample')
MIXTURE_FIELD_MEANINGS = {
    'p_curgoal': 'probability the goal is the current state',
    'p_trajgoal': 'probability it is a later state of the same trajectory',
    'p_randomgoal': 'probability it is a random dataset state',
    'geom_sample': "a later state at a geometric offset with the config's discount (else uniform over the rest)",
}
MIXTURES = ('actor', 'value', 'high')

# The config fields the sampler reads besides `batch_size`, `discount` and the goal mixtures, each with the value
# that leaves its part of the batch out. An agent's BatchSpec names those its config sets.
SAMPLER_FIELDS = {
    'nstep': 0,  # > 0: the next `nstep` observations and actions (n-step BYOL)
    'subgoal_steps': 0,  # > 0: the hierarchical goals low_goals, high_goals, high_targets
    'frame_stack': 1,  # observations as the channel-wise stack of their last frames (pixels)
    'p_aug': 0.0,  # probability of random-crop augmentation of a batch (pixels)
    'gc_negative': True,  # the value goals' reward: -1 until reached (True) or 1 on reaching (False)
}
# Where a trajectory goal may land (the `goal_rule` field of every agent that draws goals): 'ogbench', as OGBench's
# GCDataset on its compact datasets (the last row with a successor is a trajectory's final goal; uniform goals rounded
# from a continuous draw, half weight on both ends), or 'last_row' (up to the episode's last row, uniform integers).
GOAL_RULES = ('ogbench', 'last_row')


def goal_mixture(name: str, *, p_curgoal=0.0, p_trajgoal=1.0, p_randomgoal=0.0, geom_sample=False) -> dict:
    """The config fields of goal mixture `name`, for an agent's get_config(): with probability `p_curgoal` the
    current state, `p_trajgoal` a later state of the same trajectory (at a geometric offset with the config's
    `discount` if `geom_sample`, else uniform over the rest of the trajectory), `p_randomgoal` a random dataset
    state. Each is then `--agent.<name>_<field>`."""
    values = (p_curgoal, p_trajgoal, p_randomgoal, geom_sample)
    return {f'{name}_{field}': value for field, value in zip(MIXTURE_FIELDS, values)}


@dataclasses.dataclass(frozen=True)
class BatchSpec:
    """What an agent's batches hold beyond (s_t, a_t, s_{t+1}, a_{t+1}), declared once by its class (`BATCH`):
    its goal mixtures, each with what the agent uses those goals for, and the SAMPLER_FIELDS its config sets.
    `SamplerConfig.for_agent` reads exactly these fields, and the config check refuses a sampler field an agent
    does not declare (utils/config_checks.py): nothing is read by name with a default."""

    goals: Tuple[Tuple[str, str], ...] = ()  # (mixture in MIXTURES, what the agent uses its goals for)
    reads: Tuple[str, ...] = ()  # SAMPLER_FIELDS the agent's config sets
    # (mixture, predicate(config), the settings in words) of a mixture whose goals the agent uses only under some
    # settings (BYOL-gamma's value goals: not with n-step targets); the others are used whatever the config.
    used_when: Tuple[Tuple[str, Callable, str], ...] = ()

    def __post_init__(self):
        unknown = [m for m in self.mixtures if m not in MIXTURES] + [f for f in self.reads if f not in SAMPLER_FIELDS]
        if unknown:
            raise ValueError(f'BatchSpec names unknown goal mixtures or sampler fields {unknown}: the mixtures are '
                             f'{", ".join(MIXTURES)}, the sampler fields {", ".join(SAMPLER_FIELDS)}.')

    @property
    def mixtures(self) -> Tuple[str, ...]:
        return tuple(name for name, _ in self.goals)

    def with_(self, goals=(), reads=(), used_when=()) -> 'BatchSpec':
        """This spec with more goal mixtures (a mixture already declared takes the new role), sampler fields and
        conditions (`used_when`: (mixture, predicate(config), settings in words))."""
        roles = dict(self.goals)
        roles.update(goals)
        return BatchSpec(tuple(roles.items()), tuple(dict.fromkeys(self.reads + tuple(reads))),
                         self.used_when + tuple(used_when))

    def without(self, *mixtures) -> 'BatchSpec':
        return BatchSpec(tuple((m, role) for m, role in self.goals if m not in mixtures), self.reads,
                         tuple(c for c in self.used_when if c[0] not in mixtures))

    def geometric(self, config) -> bool:
        """Whether a declared goal mixture of `config` draws geometric offsets (so the sampler reads `discount`)."""
        return any(config.get(f'{m}_geom_sample', False) for m in self.mixtures)

    def draw_condition(self, mixture):
        """(predicate(config), settings in words) under which the agent uses `mixture`'s goals; (None, '') always."""
        return next(((predicate, settings) for m, predicate, settings in self.used_when if m == mixture), (None, ''))

    def uses(self, mixture, config) -> bool:
        predicate, _ = self.draw_condition(mixture)
        return mixture in self.mixtures and (predicate is None or predicate(config))

    def draws_trajectory_goals(self, mixture, config) -> bool:
        """Whether the agent uses `mixture`'s goals and the mixture can draw a later state of the trajectory."""
        return self.uses(mixture, config) and config[f'{mixture}_p_trajgoal'] > 0

    def geometric_offsets(self, config) -> bool:
        """Whether a used mixture draws trajectory goals at geometric offsets: then `discount` shapes the batch."""
        return any(self.draws_trajectory_goals(m, config) and config[f'{m}_geom_sample'] for m in self.mixtures)

    def fields(self, config) -> Tuple[str, ...]:
        """Every config field the sampler reads for this agent and `config`."""
        mixture_fields = tuple(f'{m}_{f}' for m in self.mixtures for f in MIXTURE_FIELDS)
        return (('batch_size',) + (('goal_rule',) if self.goals else ()) + mixture_fields
                + (('discount',) if self.geometric(config) else ()) + self.reads)


@dataclasses.dataclass(frozen=True)
class SamplerConfig:
    """Everything the sampler needs; hashable, so it is a static argument of the jitted step. A goal mixture the
    agent does not declare is None, and its batch entries are not drawn."""

    batch_size: int
    gamma: float  # geometric offsets k ~ Geometric(1 - gamma); gamma = 0 gives k = 1
    actor_goals: Optional[GoalMixture]
    value_goals: Optional[GoalMixture]
    high_goals: Optional[GoalMixture]  # hierarchical agents
    nstep: int = 0  # if > 0, batches carry the next `nstep` observations and actions
    subgoal_steps: int = 0  # if > 0, batches carry hierarchical low/high-level goals
    frame_stack: int = 1  # every observation is the channel-wise stack of its last `frame_stack` frames
    p_aug: float = 0.0  # probability that a batch gets random-crop augmentation (images only)
    gc_negative: bool = True  # value rewards r = -1 until the goal is reached (True) or 1 on reaching it (False)
    goal_rule: str = 'ogbench'  # where trajectory goals may land (GOAL_RULES)

    @classmethod
    def for_agent(cls, agent_class, config) -> 'SamplerConfig':
        """The sampler of `agent_class` (its `BATCH`) for `config`, which the config check has found to hold exactly
        the declared fields. The one place a sampler config is made: main.py's request check and training step, the
        benchmarks and the tests all call it."""
        spec = agent_class.BATCH

        def mixture(name):
            if name not in spec.mixtures:
                return None
            fields = [config[f'{name}_{field}'] for field in MIXTURE_FIELDS]
            return GoalMixture(*(float(p) for p in fields[:3]), bool(fields[3]))

        settings = {field: type(off)(config[field]) if field in spec.reads else off for field, off in SAMPLER_FIELDS.items()}
        return cls(batch_size=int(config['batch_size']), gamma=float(config['discount']) if spec.geometric(config) else 0.0,
                   actor_goals=mixture('actor'), value_goals=mixture('value'), high_goals=mixture('high'),
                   goal_rule=str(config['goal_rule']) if spec.goals else 'ogbench', **settings)


def geometric_offset(key, gamma: float, shape):
    """k ~ Geometric(p = 1 - gamma) on {1, 2, ...}, by inversion: k = 1 + floor(log U / log gamma)."""
    if gamma == 0.0:
        return jnp.ones(shape, jnp.int32)
    u = jax.random.uniform(key, shape, minval=jnp.finfo(jnp.float32).tiny, maxval=1.0)
    return 1 + jnp.floor(jnp.log(u) / np.log(gamma)).astype(jnp.int32)


def final_goal_row(data: DeviceDataset, idxs, goal_rule: str):
    """The last row a trajectory goal of row `idxs` may be: `T - 1`, the last row with a successor (OGBench's
    `final_state_idxs` in its compact datasets), or the episode's last row `T` (`goal_rule='last_row'`)."""
    episode_end = data.episode_end[idxs]
    return episode_end - 1 if goal_rule == 'ogbench' else episode_end


def uniform_future_index(key, idxs, final, goal_rule: str):
    """A uniform trajectory goal between `low = min(i + 1, final)` and `final`. 'ogbench': OGBench's
    round(low * d + final * (1 - d)), d ~ U[0, 1), whose law gives each row strictly between the two 1 / L and each
    end 1 / (2L) (L = final - low; `final` when L = 0). It is drawn exactly as low + ceil(u / 2) with u uniform on
    {0, ..., 2L - 1}: every half-unit of the continuous draw is one value of u. 'last_row': uniform over the integers
    [low, final]."""
    low = jnp.minimum(idxs + 1, final)
    if goal_rule == 'ogbench':
        halves = jax.random.randint(key, idxs.shape, 0, jnp.maximum(2 * (final - low), 1))
        return low + (halves + 1) // 2
    return jax.random.randint(key, idxs.shape, low, final + 1)


def sample_goal_indices(key, data: DeviceDataset, idxs, mixture: GoalMixture, gamma: float, goal_rule: str):
    """(goal row, whether it came from the row's own trajectory: current or trajectory goal) for each sampled row
    `idxs`, drawn from `mixture` (docs/method.md, section 3)."""
    key_choice, key_traj, key_random = jax.random.split(key, 3)
    final = final_goal_row(data, idxs, goal_rule)
    if mixture.geom_sample:
        traj_goals = jnp.minimum(idxs + geometric_offset(key_traj, gamma, idxs.shape), final)
    else:
        traj_goals = uniform_future_index(key_traj, idxs, final, goal_rule)
    random_goals = data.sample_idxs[jax.random.randint(key_random, idxs.shape, 0, data.sample_idxs.shape[0])]
    u = jax.random.uniform(key_choice, idxs.shape)
    from_trajectory = u < mixture.p_curgoal + mixture.p_trajgoal
    goals = jnp.where(u < mixture.p_curgoal, idxs, jnp.where(from_trajectory, traj_goals, random_goals))
    return goals, from_trajectory


def sample_batch(key, data: DeviceDataset, config: SamplerConfig) -> Dict[str, jax.Array]:
    """One training batch. Keys:

    observations, actions, next_observations, next_actions: (s_t, a_t, s_{t+1}, a_{t+1});
    actor_goals: goals for the BC loss; value_goals: goals for the representation loss;
    with `nstep`: nstep_observations [B, n, ...] = s_{t+1..t+n}, nstep_actions [B, n, A] = a_{t..t+n-1}
    and nstep_mask [B, n] (1 where t + j <= T, i.e. the target state exists in the episode);
    with `subgoal_steps`: low_goals, high_goals, high_targets (hierarchical sampler);
    rewards, masks: the RL agents' reward and bootstrap mask for the value goal (`goal_rewards`).
    """
    keys = jax.random.split(key, 5)
    B = config.batch_size
    idxs = data.sample_idxs[jax.random.randint(keys[0], (B,), 0, data.sample_idxs.shape[0])]
    episode_end = data.episode_end[idxs]
    batch = dict(
        observations=observations_at(data, idxs, config.frame_stack),
        actions=data.actions[idxs],
        next_observations=observations_at(data, idxs + 1, config.frame_stack),
        next_actions=data.actions[idxs + 1],
    )
    if config.actor_goals is not None:
        actor_goal_idxs, _ = sample_goal_indices(keys[1], data, idxs, config.actor_goals, config.gamma, config.goal_rule)
        batch['actor_goals'] = observations_at(data, actor_goal_idxs, config.frame_stack)
    if config.value_goals is not None:
        value_goal_idxs, _ = sample_goal_indices(keys[2], data, idxs, config.value_goals, config.gamma, config.goal_rule)
        batch['value_goals'] = observations_at(data, value_goal_idxs, config.frame_stack)
        batch.update(goal_rewards(idxs, value_goal_idxs, config.gc_negative))
    if config.nstep > 0:
        target_idxs = idxs[:, None] + jnp.arange(1, config.nstep + 1)[None, :]
        batch['nstep_mask'] = (target_idxs <= episode_end[:, None]).astype(jnp.float32)
        # Past the episode end the window is clamped (and masked out) so it never reads another episode.
        target_idxs = jnp.minimum(target_idxs, episode_end[:, None])
        batch['nstep_observations'] = observations_at(data, target_idxs, config.frame_stack)
        batch['nstep_actions'] = data.actions[target_idxs - 1]
    if config.subgoal_steps > 0:
        batch.update(_hierarchical_goals(keys[3], data, idxs, config))
    if config.p_aug > 0.0 and data.observations.ndim == 4:
        batch = augment_batch(jax.random.fold_in(key, AUGMENT_STREAM), batch, config.p_aug)
    return batch


def observations_at(data: DeviceDataset, rows, frame_stack: int):
    """The observations of `rows` (any shape); with frame stacking (pixels, utils/pixel_batches.py) each the
    channel-wise stack of its last `frame_stack` frames."""
    return data.observations[rows] if frame_stack == 1 else stacked_observations(data, rows, frame_stack)


def goal_rewards(idxs, goal_idxs, gc_negative: bool):
    """OGBench's goal-conditioned reward: the goal is reached iff it is the current row. masks =
    1 - reached (no bootstrap from a reached goal); rewards = reached - 1 (`gc_negative`: -1 per step
    until the goal, so V = -steps to go) or reached (1 on reaching it)."""
    reached = (goal_idxs == idxs).astype(jnp.float32)
    return dict(rewards=reached - 1.0 if gc_negative else reached, masks=1.0 - reached)


def _hierarchical_goals(key, data: DeviceDataset, idxs, config: SamplerConfig):
    """Low-level goal `min(i + subgoal_steps, final)` (`final_goal_row`); high-level goal from `high_goals`, and its
    target `min(i + subgoal_steps, high_goal)` for a goal of the row's own trajectory, else the low-level goal (as
    OGBench's HGCDataset, whose random high-level goals take the low-level goal as their target)."""
    low_goal_idxs = jnp.minimum(idxs + config.subgoal_steps, final_goal_row(data, idxs, config.goal_rule))
    high_goal_idxs, from_trajectory = sample_goal_indices(key, data, idxs, config.high_goals, config.gamma, config.goal_rule)
    high_target_idxs = jnp.where(from_trajectory, jnp.minimum(low_goal_idxs, high_goal_idxs), low_goal_idxs)
    observations = lambda rows: observations_at(data, rows, config.frame_stack)  # noqa: E731
    return dict(low_goals=observations(low_goal_idxs), high_goals=observations(high_goal_idxs),
                high_targets=observations(high_target_idxs))


# ---------------------------------------------------------------------------------------------
# The loop.
# ---------------------------------------------------------------------------------------------


def batch_config(agent) -> SamplerConfig:
    """What the sampler draws for `agent`: what its class declares (`BATCH`), set by its config."""
    return SamplerConfig.for_agent(type(agent), agent.config)


def scan_updates(agent, data, data_key, start_step, num_steps):
    """The updates, and each metric per step. Inside the scan the metrics travel as one [num_metrics] vector per
    step: one write per step instead of one per metric (on a GPU, a kernel each); they are split by name after."""
    names, sampler = [], batch_config(agent)

    def one_step(agent, step):
        batch = sample_batch(jax.random.fold_in(data_key, step), data, sampler)
        agent, info = agent.update(batch)
        names[:] = sorted(info)
        return agent, jnp.stack([jnp.asarray(info[name], jnp.float32) for name in names])

    agent, metrics = jax.lax.scan(one_step, agent, start_step + jnp.arange(num_steps))
    return agent, {name: metrics[:, i] for i, name in enumerate(names)}


@functools.partial(jax.jit, static_argnames=('num_steps',), donate_argnames=('agent',))
def train(agent, data: DeviceDataset, data_keys, start_step, num_steps: int):
    """`num_steps` updates from global step `start_step`: (the new agent, each metric per step). `data_keys` is one
    seed's sampling key, or N seeds' keys [N, 2] with `agent` N agents stacked along a leading axis (`stack_trees`):
    then the seeds train as one vmapped program on the shared dataset, and the metrics are [N, num_steps]."""
    run = lambda agent, key: scan_updates(agent, data, key, start_step, num_steps)  # noqa: E731
    return jax.vmap(run)(agent, data_keys) if data_keys.ndim == 2 else run(agent, data_keys)


def stack_trees(trees):
    """Stack pytrees of one structure (e.g. one agent per seed) along a new leading axis.

    Static fields (optimizer, model) are taken from the first tree: each agent's `create` builds equal but distinct
    objects, which would make the tree structures compare unequal.
    """
    treedef = jax.tree_util.tree_structure(trees[0])
    leaves = [jax.tree_util.tree_leaves(tree) for tree in trees]
    return jax.tree_util.tree_unflatten(treedef, [jnp.stack(group) for group in zip(*leaves)])


@jax.jit
def validation_metrics(agent, data: DeviceDataset, batch_key, noise_key):
    """The agent's losses on one batch of held-out data drawn with `batch_key` (no update, no augmentation, as
    OGBench), their noise drawn with `noise_key`: both from the validation streams, never an update's keys."""
    return agent.metrics(sample_batch(batch_key, data, dataclasses.replace(batch_config(agent), p_aug=0.0)), noise_key)
