"""What every agent is (`Agent`), and the agents that are behavior cloning plus an auxiliary loss (`BCAgent`).

    Agent                      rng, network (parameters + optimizer), targets (EMA copies), config;
    |                          `create` (checks the observations, then the agent's `build`), one jitted
    |                          `update`, `metrics`, `from_modules`
    +-- BCAgent                GCBC + alpha * L_aux: agents/gcbc.py, byol_gamma.py, tra.py, tdsr.py
    +-- GoalConditionedRLAgent offline RL baselines (agents/rl_base.py): gcivl, gciql, qrl, crl, hiql
    +-- FBAgent                forward-backward RL (agents/fb.py)

The hierarchical agents (agents/hierarchical.py) are no `Agent`: each is a composition of a high-level
policy and a flat `BCAgent`, with the same small interface (`create`, `update`, `metrics`,
`sample_actions`).

Config rules live with their owner (utils.config_checks.RuleOwner): `Agent.CONFIG_RULES` holds the rule
on `tau`, which `updated_targets` reads; `BCAgent`'s hold `alpha` and the encoder fields of
agents.encoders.ENCODER_RULES; a subclass lists only the rules of the fields it adds.

Gradient routing is written at the call site. A loss receives the parameters it differentiates,
`params`, and passes them to every network it trains: `self.network(x, name='encoder', params=params)`.
A network it only reads is called with `frozen(params)` (stop-gradient). `TrainState.__call__` has no
default parameters, so no call can forget to choose. Target networks are not part of the optimised
tree: `targets` holds the EMA parameters of each online module that has one, read with
`self.target(..., name=<online module>)` and moved towards the online parameters after every step.
"""

from typing import Any, Callable, Dict, Sequence, Tuple

import flax
import jax
import jax.numpy as jnp

from agents.encoders import ENCODER_RULES, check_encoder_fits_observations
from utils.config_checks import Rule, RuleOwner, is_finite_number, non_negative
from utils.networks import sample_gaussian
from utils.flax_utils import TrainState, ema_update, nonpytree_field
from utils.losses import bc_loss
from utils.networks import ModuleDict

LossFn = Callable[[Any], Tuple[jax.Array, Dict[str, jax.Array]]]


class Agent(flax.struct.PyTreeNode, RuleOwner):
    """Parameters, optimizer state, target parameters and RNG of one agent, and its one gradient step.

    A family defines `loss_fn(batch, rng)` (the objective of one update as a function of the
    parameters) and `sample_actions`, an agent `build`; agents with target networks keep a `tau`
    config field.
    """

    rng: Any
    network: TrainState
    targets: Dict[str, Any]  # online module name -> EMA parameters of its target network
    config: Any = nonpytree_field()

    # Rules on this class's config fields, merged with its bases' (utils.config_checks.RuleOwner) and checked
    # with COMMON_RULES by utils.config_checks.validate_config.
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
        """Initialise a ModuleDict of `modules` on `example_args`, wrap it in a train state, and start
        the target network of each module named in `targets` as an exact copy of it."""
        rng, init_rng = jax.random.split(jax.random.PRNGKey(seed))
        model = ModuleDict(modules)
        params = model.init(init_rng, example_args)['params']
        # Real copies: sharing buffers with the online parameters would break buffer donation.
        target_params = {name: jax.tree_util.tree_map(jnp.copy, params[f'modules_{name}']) for name in targets}
        network = TrainState.create(model, params, optimizer)
        return cls(rng=rng, network=network, targets=target_params, config=flax.core.FrozenDict(config.to_dict()))


class BCAgent(Agent):
    """GCBC + alpha * L_aux (the paper's objective). An agent file defines `build`, `policy_inputs`
    and, for an auxiliary loss, `representation_loss`, plus a module-level `get_config()`.

    Both losses of an update often encode the same batch entries (phi(s_t) feeds the actor and L_aux).
    An agent may compute such encodings once in `batch_encodings` (see agents.encoders.
    encode_together) and read them in `batch_policy_inputs` and `representation_loss`; without it,
    each loss encodes what it needs."""

    CONFIG_RULES = {'alpha': non_negative(1.0), **ENCODER_RULES}

    def policy_inputs(self, observations, goals, params):
        """The actor's input for (s, g), computed with `params`."""
        raise NotImplementedError

    def batch_encodings(self, batch, params):
        """Encodings of batch entries shared by the losses of one update, {} if none."""
        return {}

    def batch_policy_inputs(self, batch, params, encodings):
        """The actor's input for the batch's (s_t, actor goal)."""
        return self.policy_inputs(batch['observations'], batch['actor_goals'], params)

    def representation_loss(self, batch, params, encodings=None):
        """The auxiliary loss L_aux and its metrics; None for plain behavior cloning."""
        return None

    def actor_loss(self, batch, params, encodings=None):
        """L_BC on (s_t, a_t, actor goal). Gradients reach the actor head and the encoders it reads."""
        encodings = self.batch_encodings(batch, params) if encodings is None else encodings
        inputs = self.batch_policy_inputs(batch, params, encodings)
        means, log_stds = self.network(inputs, name='actor', params=params)
        loss = bc_loss(means, log_stds, batch['actions'])
        return loss, {'actor/bc_loss': loss, 'actor/mse': jnp.mean((means - batch['actions']) ** 2)}

    def total_loss(self, batch, params):
        """L_BC + alpha * L_aux. L_aux never reads the actor head, so it cannot update it."""
        encodings = self.batch_encodings(batch, params)
        loss, info = self.actor_loss(batch, params, encodings)
        aux = self.representation_loss(batch, params, encodings)
        if aux is not None:
            aux_loss, aux_info = aux
            info.update({f'representation/{k}': v for k, v in aux_info.items()})
            info['representation/loss'] = aux_loss
            loss = loss + self.config['alpha'] * aux_loss
        info['total_loss'] = loss
        return loss, info

    def loss_fn(self, batch, rng) -> LossFn:
        return lambda params: self.total_loss(batch, params)  # behavior cloning draws no noise

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
