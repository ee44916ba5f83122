"""Hierarchical behavioral cloning: HGCBC, HGCBC-phi and HBYOL-gamma (paper appendix "Hierarchical
Policies", table tab:hhparams; docs/method.md, section 4).

A high-level policy pi_h proposes a subgoal l, `subgoal_steps` (25) steps ahead on the way to the
goal g, and a low-level policy pi_l reaches it. Both are fixed-std Gaussian BC policies trained on
the hierarchical sampler's batches: pi_l on (s, a, low_goals), pi_h on (s, high_goals, high_targets).

    HGCBC        pi_h(l | s, g)                         pi_l(a | s, l)             GCBC low level
    HGCBC-phi    pi_h(phibar(l) | phi_h(s), phi_h(g))   pi_l(a | phi(s), phi(l))   GCBC-phi low level
    HBYOL-gamma  pi_h(phibar(l) | phibar(s), phibar(g)) pi_l(a | phi(s), phi(l))   BYOL-gamma low level

phibar is the low level's encoder (ensemble mean), which the high level reads but never trains;
phi_h is HGCBC-phi's own input encoder, trained from scratch by the high-level loss (the paper found
that better than reading phi there).

A hierarchical agent is a composition of its two levels, each with its own `update`, `metrics` and
sampling, and no placeholder in either: `low` *is* a flat agent of this repository (`GCBCAgent`,
`BYOLGammaAgent`) trained by its own `update` with `actor_goals = low_goals`, so its optimizer,
auxiliary loss and target networks are exactly those of the flat agent; `high` is a
`HighLevelPolicy`, a train state of its own (lr `high_lr`) whose variant says how pi_h reads (s, g)
and in which space it proposes subgoals (states, or the low level's representation). With one
optimizer per level, freezing a level is exact: it is simply not updated. The agent itself is only the
schedule that drives the two, and acting that chains them.

Schedule. `stage1_steps = 0` trains both levels at every step (HGCBC, as OGBench's HGCBC does).
`stage1_steps > 0` is the paper's two-stage setup: the low level's first `stage1_steps` updates train
only the low level, every later update only the high level, with the low level frozen. The switch is
a `lax.cond` on the low level's step counter, so it is one jitted program and a checkpoint resumes in
the right stage. `stage1_checkpoint` instead loads a trained low level (saved by a flat run of the
low-level agent or by a hierarchical run) and every update is stage 2.

Acting re-plans at every step by default: one jitted call runs pi_h, then pi_l on its subgoal (as
OGBench's HGCBC/HIQL do). `replan_every = k > 1` holds each subgoal for k steps at evaluation
(`evaluation_policy`, a small stateful policy that the evaluator resets at every episode start).

Under utils.training.train's vmap over seeds the stage predicate is batched, so `lax.cond` becomes a
select that runs both stages' updates: same results, at about the cost of training both levels.
"""

import os
from typing import Any

import flax
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from agents.base import (PHI_FIELDS, TrainState, bc_loss, encode_together, frozen, mean_concat, nonpytree_field,
                         state_encoder, update_keys)
from agents.byol_gamma import BYOLGammaAgent, get_config as byol_gamma_config
from agents.gcbc import GCBCAgent, get_config as gcbc_config
from utils.acting import EVALUATION_TEMPERATURE
from utils.checkpoint_format import checkpoint_file, read_state, restore_agent
from utils.config_checks import Rule, RuleOwner, at_least, field_rules, layer_sizes, non_negative, positive, text
from utils.errors import ConfigError
from utils.networks import GaussianActor, ModuleDict, sample_gaussian
from utils.random_streams import stream_key
from utils.training import goal_mixture


def phi_policy_inputs(network, observations, goals, params, encoder_name='encoder'):
    """concat(z(s), z(g)) where z is the ensemble-mean representation (phi_1 + phi_2) / 2."""
    encoded = encode_together(network, params, encoder_name, {'s': observations, 'g': goals})
    return mean_concat(encoded['s'], encoded['g'])


# ---------------------------------------------------------------------------------------------
# The high level: pi_h(subgoal | s, g), a Gaussian BC policy with its own train state. It reads the low
# level (passed in, never trained here) where its inputs or its subgoal space are the low level's.
# ---------------------------------------------------------------------------------------------


class HighLevelPolicy(flax.struct.PyTreeNode):
    """pi_h and its Adam state. A variant defines `modules` and `inputs` (how pi_h reads (s, g)), and
    the subgoal space: `subgoal_targets` (what pi_h predicts for a subgoal state) and
    `low_policy_inputs` (how pi_l reads a subgoal of that space)."""

    network: TrainState  # 'high_actor' (and the variant's own modules)

    @classmethod
    def modules(cls, config, ex_observations, subgoal_dim):
        """(modules, example_args) of pi_h; they hold a 'high_actor' with `subgoal_dim` outputs."""
        raise NotImplementedError

    def inputs(self, observations, goals, params, low):
        """pi_h's input for (s, g), computed with the high level's `params` (`low` only read)."""
        raise NotImplementedError

    @staticmethod
    def subgoal_targets(low, subgoal_states):
        """What pi_h predicts for these subgoal states (and what pi_l then conditions on)."""
        raise NotImplementedError

    @staticmethod
    def low_policy_inputs(low, observations, subgoals):
        """pi_l's input for (s, a subgoal in pi_h's output space)."""
        raise NotImplementedError

    @classmethod
    def create(cls, init_rng, config, ex_observations, low):
        subgoal_dim = cls.subgoal_targets(low, ex_observations).shape[-1]
        modules, example_args = cls.modules(config, ex_observations, subgoal_dim)
        model = ModuleDict(modules)
        return cls(network=TrainState.create(model, model.init(init_rng, example_args)['params'], optax.adam(config.high_lr)))

    def loss(self, batch, params, low):
        """L_BC of pi_h: -log pi_h(target(high_targets) | s, high_goals). Only `params` (the high level's)
        are differentiated, so the low level's encoder is a stop-gradient target here."""
        inputs = self.inputs(batch['observations'], batch['high_goals'], params, low)
        means, log_stds = self.network(inputs, name='high_actor', params=params)
        targets = self.subgoal_targets(low, batch['high_targets'])
        loss = bc_loss(means, log_stds, targets)
        return loss, {'bc_loss': loss, 'mse': jnp.mean((means - targets) ** 2)}

    def update(self, batch, low):
        """One gradient step of pi_h on `batch`, reading `low`: (new high level, metrics with grad_norm)."""
        network, info = self.network.apply_loss_fn(lambda params: self.loss(batch, params, low))
        return self.replace(network=network), info

    def metrics(self, batch, low):
        """pi_h's loss and metrics on `batch` at its current parameters, without an update."""
        return self.loss(batch, self.network.params, low)[1]

    def sample_subgoals(self, observations, goals, low, seed, temperature=1.0):
        params = self.network.params
        means, log_stds = self.network(self.inputs(observations, goals, params, low), name='high_actor', params=params)
        return sample_gaussian(seed, means, log_stds, temperature)


class StateSubgoalPolicy(HighLevelPolicy):
    """HGCBC: subgoals are states; pi_h(l | s, g) on concat(s, g), pi_l(a | s, l) the GCBC low level's."""

    @classmethod
    def modules(cls, config, ex_observations, subgoal_dim):
        actor = GaussianActor(config.high_hidden_dims, subgoal_dim, layer_norm=config.actor_layer_norm)
        return {'high_actor': actor}, {'high_actor': (jnp.concatenate([ex_observations, ex_observations], axis=-1),)}

    def inputs(self, observations, goals, params, low):
        return jnp.concatenate([observations, goals], axis=-1)

    @staticmethod
    def subgoal_targets(low, subgoal_states):
        return subgoal_states

    @staticmethod
    def low_policy_inputs(low, observations, subgoals):
        return low.policy_inputs(observations, subgoals, low.network.params)


def low_representation(low, x):
    """phibar(x): the low level's ensemble-mean representation, as its actor reads it."""
    return low.network(x, name='encoder', params=low.network.params).mean(axis=0)


class LatentSubgoalPolicy(HighLevelPolicy):
    """Subgoals are the low level's representations phibar(l): pi_l(a | phi(s), z_l) acts on them."""

    @staticmethod
    def subgoal_targets(low, subgoal_states):
        return jax.lax.stop_gradient(low_representation(low, subgoal_states))

    @staticmethod
    def low_policy_inputs(low, observations, subgoals):
        return jnp.concatenate([low_representation(low, observations), subgoals], axis=-1)


class OwnEncoderPolicy(LatentSubgoalPolicy):
    """HGCBC-phi: pi_h reads its own encoder phi_h(s), phi_h(g), trained from scratch by its loss."""

    @classmethod
    def modules(cls, config, ex_observations, subgoal_dim):
        encoder, latent_dim = state_encoder(config, ex_observations)
        modules = {
            'high_encoder': encoder,
            'high_actor': GaussianActor(config.high_hidden_dims, subgoal_dim, layer_norm=config.actor_layer_norm),
        }
        return modules, {'high_encoder': (ex_observations,), 'high_actor': (jnp.zeros((1, 2 * latent_dim)),)}

    def inputs(self, observations, goals, params, low):
        return phi_policy_inputs(self.network, observations, goals, params, encoder_name='high_encoder')


class LowEncoderPolicy(LatentSubgoalPolicy):
    """HBYOL-gamma: pi_h reads the frozen low-level representation phibar(s), phibar(g)."""

    @classmethod
    def modules(cls, config, ex_observations, subgoal_dim):
        actor = GaussianActor(config.high_hidden_dims, subgoal_dim, layer_norm=config.actor_layer_norm)
        return {'high_actor': actor}, {'high_actor': (jnp.zeros((1, 2 * subgoal_dim)),)}

    def inputs(self, observations, goals, params, low):
        return phi_policy_inputs(low.network, observations, goals, frozen(low.network.params))


# ---------------------------------------------------------------------------------------------
# The hierarchical agent: the two levels, the schedule that trains them, and acting.
# ---------------------------------------------------------------------------------------------


class HierarchicalAgent(flax.struct.PyTreeNode, RuleOwner):
    """`high` (a HighLevelPolicy) composed with `low` (a flat agent, whose target networks, if any, are
    its own). A variant names its low-level agent class and config, and its high-level policy class."""

    rng: Any  # the acting seed (sample_actions' default)
    high: HighLevelPolicy
    low: Any  # the low level: a flat agent (GCBCAgent or BYOLGammaAgent)
    config: Any = nonpytree_field()

    LOW_AGENT = None  # the flat agent class of the low level
    LOW_CONFIG = None  # its agent file's get_config, whose fields the variant's config starts from
    LOW_FIXED = {}  # low-level config fields the variant sets itself: not in its config
    HIGH_LEVEL = None  # the HighLevelPolicy class of the high level

    # The hierarchy's own fields. A variant's rules add its low level's, less LOW_FIXED and the low-level fields it
    # marks None (__init_subclass__): a field only another variant's low level reads is refused.
    CONFIG_RULES = {
        'high_lr': positive(1e-4),
        'high_hidden_dims': layer_sizes((512, 512, 512, 512)),
        'stage1_steps': non_negative(0),
        'replan_every': at_least(1, 1),
        'stage1_checkpoint': text(''),
    }

    def __init_subclass__(cls, **kwargs):
        unread = {field for field, rule in vars(cls).get('CONFIG_RULES', {}).items() if rule is None} | set(cls.LOW_FIXED)
        super().__init_subclass__(**kwargs)
        # A low-level field read under some low-level settings is judged on the low level's config (LOW_FIXED set).
        low_rules = {field: rule.reading(cls.low_config) for field, rule in cls.LOW_AGENT.CONFIG_RULES.items()}
        rules = {**low_rules, **cls.CONFIG_RULES}
        cls.CONFIG_RULES = {field: rule for field, rule in rules.items() if field not in unread}
        # The low level's actor goals are the sampler's low_goals, `subgoal_steps` ahead; its other goals stay.
        cls.BATCH = cls.LOW_AGENT.BATCH.without('actor').with_(goals=[('high', 'goals of the high-level actor')],
                                                                reads=['subgoal_steps'])

    @classmethod
    def low_config(cls, config):
        """The low level's config: the variant's, with the fields it fixes."""
        return with_fields(config, **cls.LOW_FIXED)

    @staticmethod
    def low_batch(batch):
        return dict(batch, actor_goals=batch['low_goals'])

    def is_two_stage(self):
        return self.config['stage1_steps'] > 0 and not self.config['stage1_checkpoint']

    def in_stage2(self):
        """The two-stage schedule's clock: the low level's step counter, which stops at stage1_steps
        when the low level freezes (so a restored checkpoint resumes in its stage)."""
        return self.low.network.step >= self.config['stage1_steps']

    def trained_levels(self):
        """(train_low, train_high) for the next update; traced booleans in the two-stage schedule."""
        if self.is_two_stage():
            return ~self.in_stage2(), self.in_stage2()
        return not self.config['stage1_checkpoint'], True

    def metrics(self, batch, key):
        """Both levels' losses and metrics on `batch` without an update (validation, `key` the low level's noise);
        `total_loss` is the objective of the levels the next update trains."""
        info = self.low.metrics(self.low_batch(batch), key)
        high_info = self.high.metrics(batch, self.low)
        info.update({f'high_actor/{k}': v for k, v in high_info.items()})
        info['total_loss'] = objective(info['total_loss'], high_info['bc_loss'], *self.trained_levels())
        return info

    def train_levels(self, batch, train_low: bool, train_high: bool):
        """One gradient step of the chosen levels; the other is only evaluated (grad_norm 0). The high
        level reads the low level as it was before this step."""
        low_batch = self.low_batch(batch)
        frozen_grad_norm = jnp.zeros(())  # the default float type, as the trained level's norm (float64 under x64)
        if train_low:
            low, info = self.low.update(low_batch)
        else:
            low, info = self.low, self.low.metrics(low_batch, update_keys(self.low.rng)[1])  # the key its update would draw
            info['grad_norm'] = frozen_grad_norm
        if train_high:
            high, high_info = self.high.update(batch, self.low)
        else:
            high, high_info = self.high, self.high.metrics(batch, self.low)
            high_info['grad_norm'] = frozen_grad_norm
        info.update({f'high_actor/{k}': v for k, v in high_info.items()})
        info['total_loss'] = objective(info['total_loss'], high_info['bc_loss'], train_low, train_high)
        return self.replace(low=low, high=high), info

    @jax.jit
    def update(self, batch):
        if not self.is_two_stage():
            return self.train_levels(batch, *self.trained_levels())
        in_stage2 = self.in_stage2()
        agent, info = jax.lax.cond(
            in_stage2,
            lambda agent: agent.train_levels(batch, train_low=False, train_high=True),
            lambda agent: agent.train_levels(batch, train_low=True, train_high=False),
            self,
        )
        info['stage'] = jnp.where(in_stage2, 2.0, 1.0)
        return agent, info

    def propose_subgoals(self, observations, goals, seed, temperature=1.0):
        return self.high.sample_subgoals(observations, goals, self.low, seed, temperature)

    def act_on_subgoals(self, observations, subgoals, seed, temperature=1.0):
        inputs = self.high.low_policy_inputs(self.low, observations, subgoals)
        means, log_stds = self.low.network(inputs, name='actor', params=self.low.network.params)
        return jnp.clip(sample_gaussian(seed, means, log_stds, temperature), -1.0, 1.0)

    @jax.jit
    def sample_actions(self, observations, goals, seed=None, temperature=1.0):
        """pi_h proposes a subgoal for (s, g), pi_l acts toward it; re-planned at every call."""
        seed = self.rng if seed is None else seed
        high_seed, low_seed = jax.random.split(seed)
        subgoals = self.propose_subgoals(observations, goals, high_seed, temperature)
        return self.act_on_subgoals(observations, subgoals, low_seed, temperature)

    def evaluation_policy(self):
        """Deterministic acting for `utils.evaluation.evaluate`: re-plans every step, or holds each
        subgoal for `replan_every` steps (state kept across steps, reset at every episode start)."""
        if self.config['replan_every'] <= 1:
            return lambda observations, goals: np.asarray(
                self.sample_actions(observations, goals, temperature=EVALUATION_TEMPERATURE))
        return ReplanningPolicy(self, self.config['replan_every'])

    @classmethod
    def create(cls, seed, ex_observations, ex_actions, config):
        """The low level, created (and so checked against the observations) as the flat agent it is, then
        the high level on it; with `stage1_checkpoint`, the low level restored from that file."""
        low = cls.LOW_AGENT.create(seed, ex_observations, ex_actions, cls.low_config(config))
        high = cls.HIGH_LEVEL.create(stream_key(seed, 'high/init'), config, ex_observations, low)
        agent = cls(rng=stream_key(seed, 'high/acting'), high=high, low=low, config=flax.core.FrozenDict(config.to_dict()))
        if config.stage1_checkpoint:
            agent = agent.replace(low=load_low_level(config.stage1_checkpoint, agent))
        return agent


class ReplanningPolicy:
    """pi_h re-plans every `every` steps; in between pi_l keeps acting toward the held subgoals.
    `evaluate` calls `reset` when episodes start, so lockstep and sequential evaluation agree."""

    def __init__(self, agent, every: int):
        self.agent, self.every = agent, every
        self.propose = jax.jit(lambda obs, goals: agent.propose_subgoals(obs, goals, agent.rng, EVALUATION_TEMPERATURE))
        self.act = jax.jit(lambda obs, subgoals: agent.act_on_subgoals(obs, subgoals, agent.rng, EVALUATION_TEMPERATURE))
        self.reset()

    def reset(self):
        self.steps, self.subgoals = 0, None

    def __call__(self, observations, goals):
        if self.steps % self.every == 0:
            self.subgoals = self.propose(observations, goals)
        self.steps += 1
        return np.asarray(self.act(observations, self.subgoals))


def objective(low_loss, high_loss, train_low, train_high):
    """The loss being minimised: the sum over the levels that are trained (a frozen level's loss is
    still logged, under its own name, but is not part of it)."""
    return jnp.where(train_low, low_loss, 0.0) + jnp.where(train_high, high_loss, 0.0)


def load_low_level(path, agent):
    """The low level saved at `path` (a checkpoint file, or a run directory holding one) by a flat run of the low-level
    agent or by a hierarchical run of this variant, restored into `agent.low` (same config and data shapes)."""
    path = checkpoint_file(os.path.expanduser(path))
    if not os.path.exists(path):
        raise ConfigError(f'stage1_checkpoint {path!r} does not exist.')
    try:
        saved = read_state(path)['agent']
    except Exception as e:  # not readable, or not msgpack
        raise ConfigError(f'stage1_checkpoint {path!r} cannot be read as a checkpoint ({type(e).__name__}: {e}).') from None
    try:
        return restore_agent(saved, agent.low)
    except ValueError:
        pass
    try:
        return restore_agent(saved, agent).low
    except ValueError:
        raise ConfigError(
            f'stage1_checkpoint {path!r} holds neither a {type(agent.low).__name__} nor a {type(agent).__name__} '
            f'with this config: use the checkpoint of a {type(agent.low).__name__} run (or of a run of this '
            f'hierarchical agent) with the same network sizes and dataset.'
        ) from None


def with_fields(config, **fields):
    """A copy of `config` with `fields` set (the low level's config may need fields this one lacks)."""
    config = ml_collections.ConfigDict(config.to_dict())
    config.update(fields)
    return config


class HGCBCAgent(HierarchicalAgent):
    """Subgoals are states: pi_h(l | s, g) on concat(s, g), a GCBC low level on concat(s, l)."""

    LOW_AGENT, LOW_CONFIG, HIGH_LEVEL = GCBCAgent, gcbc_config, StateSubgoalPolicy
    LOW_FIXED = {'use_phi': False}
    CONFIG_RULES = {
        **dict.fromkeys(PHI_FIELDS),  # no phi here
        'encoder': Rule(lambda v: v == 'none',
                        "must be 'none': HGCBC's subgoals are states, so on images it would predict pixels (the paper "
                        "does not run it on images either); use --agent=agents/hierarchical.py:hgcbc_phi or :hbyol_gamma (presets "
                        "hgcbc_phi_visual, hbyol_gamma_a_visual), whose subgoals are representations", 'none'),
    }


class HGCBCPhiAgent(HierarchicalAgent):
    """GCBC-phi low level (its CNN, on pixels, phi's first stage); pi_h reads its own encoder phi_h."""

    LOW_AGENT, LOW_CONFIG, HIGH_LEVEL = GCBCAgent, gcbc_config, OwnEncoderPolicy
    LOW_FIXED = {'use_phi': True}


class HBYOLGammaAgent(HierarchicalAgent):
    """BYOL-gamma low level; pi_h reads the frozen low-level representation phibar(s), phibar(g)."""

    LOW_AGENT, LOW_CONFIG, HIGH_LEVEL = BYOLGammaAgent, byol_gamma_config, LowEncoderPolicy


AGENTS = {'hgcbc': HGCBCAgent, 'hgcbc_phi': HGCBCPhiAgent, 'hbyol_gamma': HBYOLGammaAgent}  # agent_name -> class, found by agents.get_agent_class


def get_config(variant: str = 'hgcbc'):
    """`--agent=agents/hierarchical.py:<variant>`. The low level's fields (lr, actor_hidden_dims, encoder, ...; for
    HBYOL-gamma alpha, loss_type, value goals, ...) are its agent file's, less its actor goal mixture (the low level's
    goals are the sampler's low_goals) and the fields the variant fixes or never reads."""
    if variant not in AGENTS:
        raise ConfigError(f'Unknown hierarchical variant {variant!r}; variants: {", ".join(AGENTS)}.')
    variant_class = AGENTS[variant]
    config = variant_class.LOW_CONFIG()
    for field in [field for field in config if field not in field_rules(variant_class)]:
        del config[field]
    config.update(
        dict(
            agent_name=variant,  # Variant (registry key): 'hgcbc', 'hgcbc_phi' or 'hbyol_gamma'.
            high_hidden_dims=(512, 512, 512, 512),  # High-level actor MLP hidden sizes (tab:hhparams).
            high_lr=3e-4,  # High-level Adam learning rate (3e-4 HGCBC; 1e-4 HGCBC-phi, HBYOL-gamma).
            subgoal_steps=25,  # k: pi_l's goal is s_{min(t+k, T)}, pi_h's target s_{min(t+k, high goal)}.
            stage1_steps=0,  # 0: train both levels together; > 0: low level only for this many steps, then high only.
            stage1_checkpoint='',  # Path of a trained low level to load and freeze (stage 2 only); '' = none.
            replan_every=1,  # Evaluation: pi_h re-plans every this many steps (1 = every step, as OGBench's HGCBC).
            goal_rule='ogbench',  # Trajectory goals drawn as OGBench's GCDataset draws them ('last_row': up to the episode's last state).
            **goal_mixture('high'),  # High-level goals: uniform over the trajectory's future (OGBench HGCBC).
        )
    )
    return config
