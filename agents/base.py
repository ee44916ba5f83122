"""What every agent is (`Agent`), the behavior-cloning agents' objective (`BCAgent`), and the encoders they share.

    Agent                      rng, network (parameters + optimizer), targets (EMA copies), config;
    |                          `create` (checks the observations, then the agent's `build`), one jitted
    |                          `update`, `metrics`, `from_modules`
    +-- BCAgent                L_BC + alpha * L_aux: agents/gcbc.py, byol_gamma.py, tra.py, tdsr.py
    +-- GoalConditionedRLAgent offline RL baselines (agents/rl_base.py): gcivl, gciql, qrl, crl, hiql
    +-- FBAgent                forward-backward RL (agents/fb.py)

The hierarchical agents (agents/hierarchical.py) are no `Agent`: each is a composition of a high-level policy and a
flat `BCAgent`, with the same small interface (`create`, `update`, `metrics`, `sample_actions`).

The config contract (utils/config_checks.py): every field an agent's config holds has a rule, kept by the class
that reads it (`CONFIG_RULES`, merged down the class hierarchy), and an agent declares the goal mixtures its sampler
draws (`GOAL_MIXTURES`). A field nobody reads is an error before anything runs.

Gradient routing is written at the call site. A loss receives the parameters it differentiates, `params`, and
passes them to every network it trains: `self.network(x, name='encoder', params=params)`. A network it only reads is
called with `frozen(params)` (stop-gradient). `TrainState.__call__` has no default parameters, so no call can forget
to choose. Target networks are not part of the optimised tree: `targets` holds the EMA parameters of each online
module that has one, read with `self.target(..., name=<online module>)` and moved towards the online parameters
after every step.
"""

from typing import Any, Callable, Dict, Sequence, Tuple

import flax
import jax
import jax.numpy as jnp
import numpy as np

from utils.config_checks import Rule, RuleOwner, at_least, is_finite_number, non_negative, one_of, probability, switch
from utils.image_encoders import VISUAL_ENCODERS, VISUAL_LATENT_DIM, check_encoder_fits_observations, is_image_batch
from utils.networks import EnsembleEncoder, GaussianActor, ModuleDict, gaussian_log_prob, sample_gaussian
from utils.optimizers import for_backend
from utils.training import TrainState, ema_update, nonpytree_field

LossFn = Callable[[Any], Tuple[jax.Array, Dict[str, jax.Array]]]


# Compiler options for programs that run once: no XLA optimisations (the same numbers, compiled in a fraction of the time).
FAST_COMPILE = {'xla_backend_optimization_level': 0, 'xla_llvm_disable_expensive_passes': True}


class CompiledCreate:
    """`compiled_create`, which every agent class offers: an `Agent`, or a composition of agents with a `create` of
    its own (agents/hierarchical.py)."""

    @classmethod
    def compiled_create(cls, ex_observations, ex_actions, config):
        """`seed -> cls.create(seed, ex_observations, ex_actions, config)`, the whole initialisation compiled as one
        program without optimisations (the seed an argument: every seed reuses it). The same parameters, bit for bit,
        as creating eagerly, where every initialiser op is compiled, fully optimised, as an executable of its own:
        seconds for a program run once (docs/performance.md, "Start-up"). Files a `create` reads (a hierarchical
        agent's stage1_checkpoint) are read while tracing: constants of the program."""
        create = jax.jit(lambda seed, observations, actions: cls.create(seed, observations, actions, config))
        compiled = create.lower(np.int32(0), ex_observations, ex_actions).compile(FAST_COMPILE)
        return lambda seed: compiled(np.int32(seed), ex_observations, ex_actions)


class Agent(flax.struct.PyTreeNode, RuleOwner, CompiledCreate):
    """Parameters, optimizer state, target parameters and RNG of one agent, and its one gradient step.

    A family defines `loss_fn(batch, rng)` (the objective of one update as a function of the
    parameters) and `sample_actions`, an agent `build`; agents with target networks keep a `tau`
    config field.
    """

    rng: Any
    network: TrainState
    targets: Dict[str, Any]  # online module name -> EMA parameters of its target network
    config: Any = nonpytree_field()

    CONFIG_RULES = {
        'tau': Rule(lambda v: is_finite_number(v) and 0.0 < v <= 1.0,
                    'must lie in (0, 1] (EMA rate of the target network; 1 = the online network, stop-gradient)', 1.0),
        # Read by the sampler (geometric goal offsets) and by the losses that discount.
        'discount': Rule(lambda v: is_finite_number(v) and 0.0 <= v < 1.0,
                         'must lie in [0, 1) (geometric offsets k ~ Geometric(1 - gamma) need gamma < 1)', 0.99),
    }

    @classmethod
    def create(cls, seed, ex_observations, ex_actions, config):
        """The untrained agent for observations and actions shaped like `ex_observations`, `ex_actions`
        ([1, ...] each). What only the data can tell is checked here, once for every agent (an image
        encoder needs image observations, a state encoder state vectors); then the agent's `build`."""
        check_encoder_fits_observations(config, ex_observations)
        return cls.build(seed, ex_observations, ex_actions, config)

    @classmethod
    def build(cls, seed, ex_observations, ex_actions, config):
        """The agent's networks, initialised (usually with `from_modules`)."""
        raise NotImplementedError

    def loss_fn(self, batch, rng) -> LossFn:
        """`params -> (loss, metrics)` for this batch; `rng` is fresh for every update."""
        raise NotImplementedError

    def sample_actions(self, observations, goals, seed=None, temperature=1.0):
        raise NotImplementedError

    def target(self, *args, name: str, **kwargs):
        """The target network of online module `name` (never differentiated: targets are not optimised)."""
        return self.network(*args, name=name, params={f'modules_{name}': self.targets[name]}, **kwargs)

    def updated_targets(self, network: TrainState) -> Dict[str, Any]:
        """target <- tau * online + (1 - tau) * target (the paper's convention for tau), after each step."""
        return {
            name: ema_update(network.params[f'modules_{name}'], target, self.config['tau'])
            for name, target in self.targets.items()
        }

    @jax.jit
    def update(self, batch):
        new_rng, rng = jax.random.split(self.rng)
        network, info = self.network.apply_loss_fn(self.loss_fn(batch, rng))
        return self.replace(network=network, targets=self.updated_targets(network), rng=new_rng), info

    def metrics(self, batch) -> Dict[str, jax.Array]:
        """The losses and metrics of `batch` at the current parameters, without an update (validation)."""
        return self.loss_fn(batch, self.rng)(self.network.params)[1]

    @classmethod
    def from_modules(cls, seed, modules, example_args, config, optimizer, targets: Sequence[str] = ()):
        """Initialise a ModuleDict of `modules` on `example_args`, wrap it in a train state (its optimizer over one
        vector on an accelerator, `utils.optimizers.for_backend`), and start the target network of each module named
        in `targets` as an exact copy of it."""
        rng, init_rng = jax.random.split(jax.random.PRNGKey(seed))
        model = ModuleDict(modules)
        params = model.init(init_rng, example_args)['params']
        # Real copies: sharing buffers with the online parameters would break buffer donation.
        target_params = {name: jax.tree_util.tree_map(jnp.copy, params[f'modules_{name}']) for name in targets}
        network = TrainState.create(model, params, for_backend(optimizer))
        return cls(rng=rng, network=network, targets=target_params, config=flax.core.FrozenDict(config.to_dict()))


def bc_loss(means, log_stds, actions):
    """L_BC = -E[log pi(a_t | s_t, g)] for a diagonal Gaussian policy."""
    return -jnp.mean(gaussian_log_prob(means, log_stds, actions))


# ---------------------------------------------------------------------------------------------
# Behavior cloning plus an auxiliary representation loss: the paper's objective.
# ---------------------------------------------------------------------------------------------

# Rules on the fields of the agents that read observations through an encoder (BCAgent's family, FB and the
# hierarchical agents include them): the image encoder (or 'none' for state vectors), phi's size and ensemble,
# the layer norms, and the pixel pipeline's frame stacking and crop augmentation (read by the sampler).
ENCODER_RULES = {
    'encoder': one_of('none', *VISUAL_ENCODERS),
    'latent_dim': non_negative(0),
    'num_ensemble': at_least(1, 2),
    'encoder_layer_norm': switch(True),
    'actor_layer_norm': switch(False),
    'frame_stack': at_least(1, 1),
    'p_aug': probability(0.5),
}


class BCAgent(Agent):
    """Goal-conditioned behavior cloning with an auxiliary loss on the representation the actor reads:

        L = L_BC + alpha * L_aux,    L_BC = -E[log pi(a_t | s_t, g)]        (the paper's objective)

    An agent file defines `build`, `encode`, `actor_input` and, for an auxiliary loss, `representation_loss`,
    plus a module-level `get_config()`. `encode` is the update's one encoding cache: every encoder output both
    losses read, computed once (and, with `encode_together`, in one call per encoder).
    """

    CONFIG_RULES = {'alpha': non_negative(1.0), **ENCODER_RULES}
    GOAL_MIXTURES = ('actor',)

    def encode(self, batch, params) -> Dict[str, jax.Array]:
        """The encodings of `batch`'s entries that the actor and L_aux read, {} if none. `batch` may hold only
        `observations` and `actor_goals` (acting): encode what is there."""
        return {}

    def actor_input(self, batch, z):
        """The actor's input for the batch's (s_t, actor goal), from the batch and its encodings `z`."""
        raise NotImplementedError

    def representation_loss(self, batch, z, params):
        """(L_aux, metrics) given the batch's encodings `z`; None for plain behavior cloning."""
        return None

    def total_loss(self, batch, params):
        """L_BC + alpha * L_aux. L_aux never reads the actor head, so it cannot update it."""
        z = self.encode(batch, params)
        means, log_stds = self.network(self.actor_input(batch, z), name='actor', params=params)
        loss = bc_loss(means, log_stds, batch['actions'])
        info = {'actor/bc_loss': loss, 'actor/mse': jnp.mean((means - batch['actions']) ** 2)}
        aux = self.representation_loss(batch, z, params)
        if aux is not None:
            aux_loss, aux_info = aux
            info.update({f'representation/{k}': v for k, v in aux_info.items()})
            info['representation/loss'] = aux_loss
            loss = loss + self.config['alpha'] * aux_loss
        info['total_loss'] = loss
        return loss, info

    def loss_fn(self, batch, rng) -> LossFn:
        return lambda params: self.total_loss(batch, params)  # behavior cloning draws no noise

    def policy_inputs(self, observations, goals, params):
        """The actor's input for (s, g), as an update computes it for the batch's (s_t, actor goal)."""
        batch = {'observations': observations, 'actor_goals': goals}
        return self.actor_input(batch, self.encode(batch, params))

    def representations(self, observations, actions, goals):
        """(prediction for s, representation of g), ensemble means, as the paper's analyses compare
        them (docs/method.md, section 5): psi(phi(s), a) or psi(s, a) against phi(g). Agents with a
        representation override this."""
        raise NotImplementedError(f'{type(self).__name__} has no learned representation to analyse.')

    @jax.jit
    def sample_actions(self, observations, goals, seed=None, temperature=1.0):
        params = self.network.params
        means, log_stds = self.network(self.policy_inputs(observations, goals, params), name='actor', params=params)
        seed = self.rng if seed is None else seed
        return jnp.clip(sample_gaussian(seed, means, log_stds, temperature), -1.0, 1.0)


# ---------------------------------------------------------------------------------------------
# The state encoders phi / psi and the actor head every representation agent builds, and how (state, goal)
# becomes the actor's input.
# ---------------------------------------------------------------------------------------------

def encode_together(network, params, name, arrays):
    """{key: network(array, name=name)} for a dict of arrays, computed as ONE call on their concatenation along the
    batch axis. Row for row the same function (every layer acts on rows independently); on an accelerator, one set
    of kernels instead of one per array. Outputs are [M, B_k, d] ensemble outputs, split back along axis 1."""
    keys = list(arrays)
    encoded = network(jnp.concatenate([arrays[k] for k in keys], axis=0), name=name, params=params)
    ends = np.cumsum([arrays[k].shape[0] for k in keys])
    return dict(zip(keys, jnp.split(encoded, ends[:-1], axis=1)))


def mean_concat(z_s, z_g):
    """concat(mean_m z_s, mean_m z_g) of ensemble outputs [M, B, d]: the actor's input."""
    return jnp.concatenate([z_s.mean(axis=0), z_g.mean(axis=0)], axis=-1)


def phi_policy_inputs(network, observations, goals, params, encoder_name='encoder'):
    """concat(z(s), z(g)) where z is the ensemble-mean representation (phi_1 + phi_2) / 2."""
    encoded = encode_together(network, params, encoder_name, {'s': observations, 'g': goals})
    return mean_concat(encoded['s'], encoded['g'])


def present(batch, keys):
    """{key: batch[key]} of those `keys` the batch holds (a batch of (s, g) at acting time holds two)."""
    return {key: batch[key] for key in keys if key in batch}


def psi_inputs(observations, actions, action_conditioned: bool):
    """The arguments of a state encoder psi (an `EnsembleEncoder`): (s,), or (s, a) for the action-conditioned (^a)
    variants, where the encoder concatenates a to s (or to its image features)."""
    return (observations, actions) if action_conditioned else (observations,)


def latent_dim_for(config, ex_observations) -> int:
    """phi's output size: config.latent_dim, or when 0 the paper's default: |s| for states (64 below 8 dimensions,
    pointmaze's xy, where that latent is degenerate; docs/method.md, section 4), 64 for images."""
    if config.latent_dim > 0:
        return config.latent_dim
    if is_image_batch(ex_observations):
        return VISUAL_LATENT_DIM
    obs_dim = ex_observations.shape[-1]
    return obs_dim if obs_dim >= 8 else 64


def state_encoder(config, ex_observations):
    """(phi, d): the ensemble encoder of states (encoder_hidden_dims, encoder_layer_norm, num_ensemble), behind the
    image encoder config.encoder when the observations are images. Every agent builds its phi / psi encoders here."""
    d = latent_dim_for(config, ex_observations)
    encoder = EnsembleEncoder(config.encoder_hidden_dims, d, config.num_ensemble, config.encoder_layer_norm,
                              image_encoder=VISUAL_ENCODERS.get(config.encoder))
    return encoder, d


def bc_actor(config, action_dim: int):
    """The Gaussian actor head of the behavior-cloning agents (actor_hidden_dims, actor_layer_norm)."""
    return GaussianActor(config.actor_hidden_dims, action_dim, layer_norm=config.actor_layer_norm)


def two_encoder_modules(config, ex_observations, ex_actions):
    """(modules, example_args) of an agent with two encoder ensembles of states and an actor on two of their
    representations (TRA, TD-SR): phi ('encoder'), psi ('psi_encoder', a copy of phi's architecture that also reads
    a_t when config.action_conditioned) and the actor ('actor') on concat(z_s, z_g), 2 * d inputs."""
    encoder, d = state_encoder(config, ex_observations)
    modules = {'encoder': encoder, 'psi_encoder': encoder.clone(), 'actor': bc_actor(config, ex_actions.shape[-1])}
    example_args = {
        'encoder': (ex_observations,),
        'psi_encoder': psi_inputs(ex_observations, ex_actions, config.action_conditioned),
        'actor': (jnp.zeros((1, 2 * d)),),
    }
    return modules, example_args
