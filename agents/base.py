"""What every agent is: `Agent` (its parameters and one gradient step), and `BCAgent`, the behavior-cloning agents'
objective, the paper's

    L = L_BC + alpha * L_aux,    L_BC = -E[log pi(a_t | phi(s_t), phi(g))],

whose L_aux each agent file writes (agents/byol_gamma.py: BYOL-gamma's). Then the encoder and actor head they build.

    Agent                      rng, network (parameters + optimizer), targets (EMA copies), config; `create`,
    |                          one jitted `update`, `metrics`
    +-- BCAgent                L_BC + alpha * L_aux: agents/gcbc.py, byol_gamma.py, tra.py, tdsr.py
    +-- GoalConditionedRLAgent offline RL baselines (agents/rl_base.py): gcivl, gciql, qrl, crl, hiql
    +-- FBAgent                forward-backward RL (agents/fb.py)

The hierarchical agents (agents/hierarchical.py) compose a high-level policy and a flat `BCAgent` behind the same
interface. Every config field has a rule kept by the class that reads it (`CONFIG_RULES`, utils/config_checks.py).

Gradient routing is written at the call site: a loss passes the parameters it differentiates to every network it
trains, `self.network(x, name='encoder', params=params)`, and `frozen(params)` to a network it only reads
(`TrainState.__call__` has no default). Target networks are outside the optimised tree: `targets` holds the EMA
parameters of each online module that has one, read with `self.target(..., name=<online module>)`.
"""

from typing import Any, Callable, Dict, NamedTuple, Sequence, Tuple

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax

from utils.config_checks import (DISCOUNT_RULE, Rule, RuleOwner, at_least, is_finite_number, layer_sizes, non_negative,
                                 one_of, switch)
from utils.image_encoders import VISUAL_ENCODERS, VISUAL_LATENT_DIM, check_encoder_fits_observations, is_image_batch
from utils.networks import EnsembleEncoder, GaussianActor, ModuleDict, gaussian_log_prob, sample_gaussian
from utils.random_streams import stream_key
from utils.training import BatchSpec

LossFn = Callable[[Any], Tuple[jax.Array, Dict[str, jax.Array]]]


def nonpytree_field(**kwargs):
    """A dataclass field that is static (not a leaf): configs, models, optimizers."""
    return flax.struct.field(pytree_node=False, **kwargs)


def frozen(params):
    """`params` read without gradient: a loss may evaluate these networks but cannot train them."""
    return jax.lax.stop_gradient(params)


class TrainState(flax.struct.PyTreeNode):
    """Parameters, optimizer and optimizer state of one ModuleDict network."""

    step: jax.Array
    model: Any = nonpytree_field()  # the ModuleDict (utils/networks.py) whose parameters these are
    tx: Any = nonpytree_field()
    params: Any = None
    opt_state: Any = None

    @classmethod
    def create(cls, model, params, tx):
        return cls(step=jnp.array(0, jnp.int32), model=model, tx=tx, params=params, opt_state=tx.init(params))

    def __call__(self, *args, name: str, params, **kwargs):
        """Run sub-module `name` with `params`: the parameters being differentiated, `frozen(...)`
        ones, or `self.params` when acting. There is no default, so every call says which."""
        return self.model.apply({'params': params}, *args, name=name, **kwargs)

    def apply_gradients(self, grads):
        updates, opt_state = self.tx.update(grads, self.opt_state, self.params)
        return self.replace(step=self.step + 1, params=optax.apply_updates(self.params, updates), opt_state=opt_state)

    def apply_loss_fn(self, loss_fn):
        """One gradient step on `loss_fn(params) -> (loss, info)`; `info` gains the global gradient norm."""
        grads, info = jax.grad(loss_fn, has_aux=True)(self.params)
        info['grad_norm'] = optax.tree.norm(grads)
        return self.apply_gradients(grads), info


def update_keys(rng):
    """(the agent's next rng, this update's noise key): one step of the agent's `update` stream (utils/random_streams.py)."""
    next_rng, noise_key = jax.random.split(rng)
    return next_rng, noise_key


def ema_update(online, target, tau: float):
    """target <- tau * online + (1 - tau) * target, leaf by leaf."""
    return jax.tree_util.tree_map(lambda o, t: tau * o + (1.0 - tau) * t, online, target)


# The rule of `tau`, the EMA rate of the target networks, which the agents that have them include in their CONFIG_RULES.
TARGET_RULES = {
    'tau': Rule(lambda v: is_finite_number(v) and 0.0 < v <= 1.0,
                'must lie in (0, 1] (EMA rate of the target network; 1 = a copy of the online weights the last step read)', 1.0),
}


class Agent(flax.struct.PyTreeNode, RuleOwner):
    """Parameters, optimizer state, target parameters and RNG of one agent, and its one gradient step. A family
    defines `loss_fn` and `sample_actions`, an agent `build`."""

    rng: Any
    network: TrainState
    targets: Dict[str, Any]  # online module name -> EMA parameters of its target network
    config: Any = nonpytree_field()

    CONFIG_RULES = {
        'discount': DISCOUNT_RULE,  # read by the sampler (geometric goal offsets) and by the losses that discount
    }

    @classmethod
    def create(cls, seed, ex_observations, ex_actions, config):
        """The untrained agent for observations and actions shaped like `ex_observations`, `ex_actions` ([1, ...]
        each): the agent's `build`, once the encoder is known to fit the observations."""
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

    @jax.jit
    def update(self, batch):
        """One gradient step of the loss on `batch`, and the target networks' EMA towards the online weights this
        step's loss read (before the step, as OGBench's `target_update` and the paper's authors'): (the new agent,
        metrics)."""
        new_rng, noise_key = update_keys(self.rng)
        network, info = self.network.apply_loss_fn(self.loss_fn(batch, noise_key))
        return self.replace(network=network, targets=self.updated_targets(self.network), rng=new_rng), info

    def target(self, *args, name: str, **kwargs):
        """The target network of online module `name` (never differentiated: targets are not optimised)."""
        return self.network(*args, name=name, params={f'modules_{name}': self.targets[name]}, **kwargs)

    def updated_targets(self, network: TrainState) -> Dict[str, Any]:
        """target <- tau * online + (1 - tau) * target (the paper's convention for tau) for the online weights of
        `network`."""
        return {
            name: ema_update(network.params[f'modules_{name}'], target, self.config['tau'])
            for name, target in self.targets.items()
        }

    def metrics(self, batch, key) -> Dict[str, jax.Array]:
        """The losses and metrics of `batch` at the current parameters, without an update (validation); `key` draws
        the losses' noise, from a stream of its own: never a key an update draws."""
        return self.loss_fn(batch, key)(self.network.params)[1]

    @classmethod
    def from_modules(cls, seed, modules, example_args, config, optimizer, targets: Sequence[str] = ()):
        """Initialise a ModuleDict of `modules` on `example_args`, wrap it in a train state with `optimizer`, and start
        the target network of each module named in `targets` as an exact copy of it."""
        model = ModuleDict(modules)
        params = model.init(stream_key(seed, 'init'), example_args)['params']
        # Real copies: sharing buffers with the online parameters would break buffer donation.
        target_params = {name: jax.tree_util.tree_map(jnp.copy, params[f'modules_{name}']) for name in targets}
        network = TrainState.create(model, params, optimizer)
        return cls(rng=stream_key(seed, 'update'), network=network, targets=target_params, config=flax.core.FrozenDict(config.to_dict()))


def bc_loss(means, log_stds, actions):
    """L_BC = -E[log pi(a_t | s_t, g)] for a diagonal Gaussian policy."""
    return -jnp.mean(gaussian_log_prob(means, log_stds, actions))


# The encoder and actor-head fields that every behavior-cloning agent shares: each one's default, rule, the network
# that reads it and its one-line meaning, in this one place. An agent's get_config() takes them with
# **encoder_fields(); adding a setting for all of them is one entry here plus its reader (`state_encoder` for phi's,
# `bc_actor` for the actor's; docs/adding_a_method.md shows one).
class EncoderField(NamedTuple):
    default: Any
    rule: Rule
    network: str  # 'input' (every network's observation input), 'phi' (the encoder ensemble) or 'actor'
    meaning: str


ENCODER_FIELDS = {
    'encoder': EncoderField('none', one_of('none', *VISUAL_ENCODERS), 'input',
                            "'none': state vectors; 'impala_small': OGBench's CNN on pixel observations (where: the agent's file)."),
    'encoder_hidden_dims': EncoderField((64, 64, 64), layer_sizes((64, 64, 64)), 'phi', "phi's (and psi's) MLP hidden sizes."),
    'encoder_layer_norm': EncoderField(True, switch(True), 'phi', "Layer norm in phi's (and psi's) hidden layers."),
    'latent_dim': EncoderField(0, non_negative(0), 'phi', 'phi output size; 0 = |s| (64 when |s| < 8, e.g. pointmaze, and for images).'),
    'num_ensemble': EncoderField(2, at_least(1, 2), 'phi', 'Encoder ensemble members (each with its own predictors); the actor sees their mean.'),
    'actor_hidden_dims': EncoderField((512, 512, 512), layer_sizes((512, 512, 512)), 'actor', 'Actor head MLP hidden sizes.'),
    'actor_layer_norm': EncoderField(False, switch(False), 'actor', "Layer norm in the actor MLP (off by default, as in OGBench's GCBC)."),
}
ENCODER_RULES = {field: spec.rule for field, spec in ENCODER_FIELDS.items()}
PHI_FIELDS = tuple(field for field, spec in ENCODER_FIELDS.items() if spec.network == 'phi')


def encoder_fields(**changes) -> dict:
    """ENCODER_FIELDS at their defaults, `changes` applied: `**encoder_fields()` in an agent's get_config()."""
    unknown = set(changes) - set(ENCODER_FIELDS)
    if unknown:
        raise ValueError(f'encoder_fields: {sorted(unknown)} are not encoder fields ({", ".join(ENCODER_FIELDS)}).')
    return {field: changes.get(field, spec.default) for field, spec in ENCODER_FIELDS.items()}


class BCAgent(Agent):
    """Goal-conditioned behavior cloning with an auxiliary loss on the representation the actor reads:

        L = L_BC + alpha * L_aux,    L_BC = -E[log pi(a_t | s_t, g)]        (the paper's objective)

    An agent file defines `build`, `actor_input` and, for an auxiliary loss, `representation_loss`, plus a
    module-level `get_config()`; an agent whose encoder phi ('encoder') reads the batch says which entries in
    `encodes`, and the base encodes them.
    """

    # `discount` is read where a goal mixture draws geometric offsets (utils.config_checks.field_rules), unless the
    # agent's loss discounts (TD-SR: its own rule).
    CONFIG_RULES = {'alpha': non_negative(1.0), **ENCODER_RULES, 'discount': None}
    BATCH = BatchSpec(goals=(('actor', 'goals of the behavior-cloning loss'),), reads=('frame_stack', 'p_aug'))

    def encodes(self) -> Tuple[str, ...]:
        """The batch entries that phi encodes for the two losses (the actor's input and L_aux), () for none."""
        return ()

    def encode(self, batch, params) -> Dict[str, jax.Array]:
        """{entry: phi(batch[entry])} of the entries `encodes` names that the batch holds (acting holds only
        `observations` and `actor_goals`), [M, B, d] each."""
        return encode_together(self.network, params, 'encoder', {key: batch[key] for key in self.encodes() if key in batch})

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
        """(prediction for s, representation of g), ensemble means, as the paper's analyses compare them
        (docs/method.md, section 5): psi(phi(s), a) or psi(s, a) against phi(g)."""
        raise NotImplementedError(f'{type(self).__name__} has no learned representation to analyse.')

    @jax.jit
    def sample_actions(self, observations, goals, seed=None, temperature=1.0):
        params = self.network.params
        means, log_stds = self.network(self.policy_inputs(observations, goals, params), name='actor', params=params)
        seed = self.rng if seed is None else seed
        return jnp.clip(sample_gaussian(seed, means, log_stds, temperature), -1.0, 1.0)


# ---------------------------------------------------------------------------------------------
# The encoder and actor head every representation agent builds, and their config fields.
# ---------------------------------------------------------------------------------------------


def encode_together(network, params, name, arrays):
    """{key: network(array, name=name)} for a dict of arrays, computed as ONE call on their concatenation along the
    batch axis. Row for row the same function (every layer acts on rows independently); on an accelerator, one set
    of kernels instead of one per array. Outputs are [M, B_k, d] ensemble outputs, split back along axis 1."""
    keys = list(arrays)
    if not keys:
        return {}
    encoded = network(jnp.concatenate([arrays[k] for k in keys], axis=0), name=name, params=params)
    ends = np.cumsum([arrays[k].shape[0] for k in keys])
    return dict(zip(keys, jnp.split(encoded, ends[:-1], axis=1)))


def mean_concat(z_s, z_g):
    """concat(mean_m z_s, mean_m z_g) of ensemble outputs [M, B, d]: the actor's input."""
    return jnp.concatenate([z_s.mean(axis=0), z_g.mean(axis=0)], axis=-1)


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
    image encoder config.encoder for images. Every agent builds its phi / psi encoders here."""
    d = latent_dim_for(config, ex_observations)
    encoder = EnsembleEncoder(config.encoder_hidden_dims, d, config.num_ensemble, config.encoder_layer_norm,
                              image_encoder=VISUAL_ENCODERS.get(config.encoder))
    return encoder, d


def bc_actor(config, action_dim: int):
    """The Gaussian actor head of the behavior-cloning agents (actor_hidden_dims, actor_layer_norm)."""
    return GaussianActor(config.actor_hidden_dims, action_dim, layer_norm=config.actor_layer_norm)
