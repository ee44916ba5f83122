"""What each agent's losses are fed, checked by what they compute, on any machine. For every agent class, and the
settings that rewire one (GCBC-phi, BYOL-gamma's n-step objective and EMA targets, the hierarchies' levels), one
compiled function gives the value of each loss term and of the objective, and their gradients with respect to every
online parameter, at random parameters, random EMA targets unlike them and a random batch (GCBC, GCBC-phi and
BYOL-gamma^a are probed as the low levels of the hierarchies, which are those agents). From it:

- which modules each term trains: its gradient is exactly zero there, or not zero in any ensemble member (the
  auxiliary loss never reaches the actor head, BC reaches phi, an actor loss never trains the critic it reads);
- the weight of each term in the objective: the objective's value is the weighted sum of the terms' values, and where
  one term alone trains a module the objective's gradient there is that term's times its weight, bit for bit (the
  weights set here, alpha = 2 and FB's bc_coef = 2, are powers of two, which scale a gradient without rounding), so
  alpha on the wrong term, or a term counted twice or not at all, fails;
- what each term reads: its value or gradient, recomputed with one batch entry or one target network redrawn, moves,
  or both stay bit for bit (value targets come from the EMA copy, BC reads the actor goals, never the value goals);
- that ensemble members are separate: every member has its own parameters (at initialisation too), and a term that
  trains the members one by one gives member 0 the same gradient whatever member 1's parameters are.

Then one update, of a flat and of a hierarchical agent, is exactly one Adam step on the gradient of its loss (a doubled
update fails). tests/agents/test_target_update.py checks the same of every agent with target networks.
"""

import dataclasses
import functools
from typing import Callable, Dict, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from agents.hierarchical import HierarchicalAgent
from configs.presets import get_config as preset_config
from tests.helpers import ACTION_DIM, OBS_DIM, assert_one_update, assert_same_leaves, random_agent, random_batch
from utils.networks import EnsembleEncoder, EnsemblePredictor

pytestmark = pytest.mark.xdist_group('agent_wiring')  # one worker compiles each agent's probe once for all its tests

ALPHA = 2.0  # the auxiliary weight here: a power of two, so alpha * (a gradient) is exact
NOISE_KEY = jax.random.PRNGKey(7)  # the losses' noise (FB's z and policy noise)
F32 = np.float32

# Tiny networks: one hidden layer of 8 units (FB's forward map needs two), no layer norm (it changes no routing).
TINY = dict(batch_size=8, actor_hidden_dims=(8,), value_hidden_dims=(8,), encoder_hidden_dims=(8,),
            predictor_hidden_dims=(8,), high_hidden_dims=(8,), latent_dim=8, layer_norm=False, encoder_layer_norm=False)


@dataclasses.dataclass(frozen=True)
class Case:
    """An agent setting and what the method says its losses are fed. Module names are the agent's ('actor', ...; a
    hierarchy's 'low/actor', 'high/high_actor'); terms are (name, the metric holding its value, its weight)."""

    preset: str
    fields: dict
    terms: Tuple[Tuple[str, str, float], ...]
    trains: Dict[str, set]  # term -> the modules it trains
    reads: Dict[str, set]  # term -> the batch entries its value depends on
    target_reads: Dict[str, set] = dataclasses.field(default_factory=dict)  # term -> the target networks it reads
    members: Dict[str, int] = dataclasses.field(default_factory=dict)  # ensemble module -> its number of members
    separate: Tuple[str, ...] = ()  # terms that train each ensemble member on its own
    objective: Optional[Callable] = None  # {term: value} -> the objective, in the agent's order; None: the weighted sum

    def config(self):
        config = preset_config(self.preset)
        for field, value in {**TINY, **self.fields}.items():
            if field in config:
                config[field] = value
        return config

    def expected_objective(self, values):
        if self.objective is not None:
            return self.objective(values)
        total = F32(0.0)
        for name, _, weight in self.terms:
            total = total + F32(weight) * values[name]
        return total


BC_READS = {'observations', 'actor_goals', 'actions'}
LOW_BC_READS = {'observations', 'low_goals', 'actions'}
HIGH_READS = {'observations', 'high_goals', 'high_targets'}
BC = ('bc', 'actor/bc_loss', 1.0)
AUX = ('aux', 'representation/loss', ALPHA)
HIGH = ('high', 'high_actor/bc_loss', 1.0)

# GCBC, GCBC-phi and BYOL-gamma^a (geometric, phibar the stop-gradient online encoder) are probed as the low levels of
# HGCBC, HGCBC-phi and HBYOL-gamma^a, which are those flat agents (agents/hierarchical.py), fed the low goals.
CASES = {
    # n-step BYOL with an EMA target encoder: psi_f^j(phi(s_t), a_t..a_{t+j-1}) against phibar(s_{t+j}).
    'byol_nstep_ema': Case('byol_nstep3_a', {'alpha': ALPHA, 'tau': 0.5, 'nstep': 2}, (BC, AUX),
                           {'bc': {'actor', 'encoder'}, 'aux': {'encoder', 'forward_predictor'}},
                           {'bc': BC_READS, 'aux': {'observations', 'nstep_actions', 'nstep_observations', 'nstep_mask'}},
                           {'aux': {'encoder'}}, {'encoder': 2, 'forward_predictor': 2}, ('aux',)),
    # TRA: pi(psi(s), phi(g)); InfoNCE of psi(s_t) against phi(s_+).
    'tra': Case('tra', {'alpha': ALPHA}, (BC, AUX),
                {'bc': {'actor', 'psi_encoder', 'encoder'}, 'aux': {'psi_encoder', 'encoder'}},
                {'bc': BC_READS, 'aux': {'observations', 'value_goals'}},
                members={'encoder': 2, 'psi_encoder': 2}, separate=('aux',)),
    # TD-SR^a: pi(phi(s), phi(g)); psi(s_t, a_t) . phi(s') against gamma psibar(s_{t+1}, a_{t+1}) . phibar(s').
    'tdsr_a': Case('tdsr_a', {'alpha': ALPHA}, (BC, AUX),
                   {'bc': {'actor', 'encoder'}, 'aux': {'psi_encoder', 'encoder'}},
                   {'bc': BC_READS, 'aux': {'observations', 'actions', 'next_observations', 'next_actions'}},
                   {'aux': {'encoder', 'psi_encoder'}}, {'encoder': 2, 'psi_encoder': 2}, ('aux',)),
    # FB: z = B(value goal) or a sphere sample; the TD loss trains F and B, -Q + bc_coef * BC the actor.
    'fb': Case('fb', {'bc_coef': 2.0, 'encoder_hidden_dims': (8, 8)},
               (('critic', 'critic/loss', 1.0), ('q', 'actor/q_loss', 1.0), ('bc', 'actor/bc_loss', 2.0)),
               {'critic': {'forward', 'backward'}, 'q': {'actor'}, 'bc': {'actor'}},
               {'critic': {'observations', 'actions', 'next_observations', 'value_goals'},
                'q': {'observations', 'value_goals'}, 'bc': {'observations', 'actions', 'value_goals'}},
               {'critic': {'forward', 'backward'}}, {'forward': 2}, ('critic',),
               objective=lambda v: v['critic'] + (v['q'] + F32(2.0) * v['bc'])),
    'gcivl': Case('gcivl', {}, (('value', 'value/loss', 1.0), ('actor', 'actor/loss', 1.0)),
                  {'value': {'value'}, 'actor': {'actor'}},
                  {'value': {'observations', 'next_observations', 'value_goals', 'rewards', 'masks'},
                   'actor': {'observations', 'next_observations', 'actor_goals', 'actions'}},
                  {'value': {'value'}}, {'value': 2}, ('value',)),
    'gciql': Case('gciql', {}, (('value', 'value/loss', 1.0), ('critic', 'critic/loss', 1.0), ('actor', 'actor/loss', 1.0)),
                  {'value': {'value'}, 'critic': {'critic'}, 'actor': {'actor'}},
                  {'value': {'observations', 'value_goals', 'actions'},
                   'critic': {'observations', 'actions', 'next_observations', 'value_goals', 'rewards', 'masks'},
                   'actor': {'observations', 'actor_goals', 'actions'}},
                  {'value': {'critic'}}, {'critic': 2, 'value': 1}, ('critic',)),
    # QRL: the quasimetric d(s, g) of latents z(s) ('value'), its Lagrange multiplier, and the latent dynamics model.
    'qrl': Case('qrl', {}, (('value', 'value/loss', 1.0), ('dynamics', 'dynamics/loss', 1.0), ('actor', 'actor/loss', 1.0)),
                {'value': {'value', 'lam'}, 'dynamics': {'value', 'dynamics'}, 'actor': {'actor'}},
                {'value': {'observations', 'value_goals', 'next_observations'},
                 'dynamics': {'observations', 'next_observations', 'actions'},
                 'actor': {'observations', 'actor_goals', 'actions'}}),
    'crl': Case('crl', {}, (('critic', 'critic/loss', 1.0), ('actor', 'actor/loss', 1.0)),
                {'critic': {'critic'}, 'actor': {'actor'}},
                {'critic': {'observations', 'actions', 'value_goals'}, 'actor': {'observations', 'actor_goals', 'actions'}},
                members={'critic': 2}, separate=('critic',)),
    'hiql': Case('hiql', {'rep_dim': 4},
                 (('value', 'value/loss', 1.0), ('low_actor', 'low_actor/loss', 1.0), ('high_actor', 'high_actor/loss', 1.0)),
                 {'value': {'goal_rep', 'value'}, 'low_actor': {'low_actor'}, 'high_actor': {'high_actor'}},
                 {'value': {'observations', 'next_observations', 'value_goals', 'rewards', 'masks'},
                  'low_actor': {'observations', 'next_observations', 'low_goals', 'actions'},
                  'high_actor': HIGH_READS},
                 {'value': {'value'}}, {'value': 2}, ('value',)),
    # The hierarchies, both levels trained at every step: the low level is the flat agent on (s, low goal).
    'hgcbc': Case('hgcbc', {}, (BC, HIGH), {'bc': {'low/actor'}, 'high': {'high/high_actor'}},
                  {'bc': LOW_BC_READS, 'high': HIGH_READS}),
    'hgcbc_phi': Case('hgcbc_phi', {'stage1_steps': 0}, (BC, HIGH),
                      {'bc': {'low/actor', 'low/encoder'}, 'high': {'high/high_actor', 'high/high_encoder'}},
                      {'bc': LOW_BC_READS, 'high': HIGH_READS}, members={'low/encoder': 2, 'high/high_encoder': 2}),
    'hbyol_gamma_a': Case('hbyol_gamma_a', {'stage1_steps': 0, 'alpha': ALPHA}, (BC, AUX, HIGH),
                          {'bc': {'low/actor', 'low/encoder'},
                           'aux': {'low/encoder', 'low/forward_predictor', 'low/backward_predictor'},
                           'high': {'high/high_actor'}},
                          {'bc': LOW_BC_READS, 'aux': {'observations', 'actions', 'value_goals'}, 'high': HIGH_READS},
                          members={'low/encoder': 2, 'low/forward_predictor': 2, 'low/backward_predictor': 2},
                          separate=('aux',)),
}


# ---------------------------------------------------------------------------------------------
# The probe: each term's value and gradient, compiled once per case.
# ---------------------------------------------------------------------------------------------


def module_params(agent):
    """{module name: its online parameters} of a flat or hierarchical agent."""
    if isinstance(agent, HierarchicalAgent):
        return {**{f'low/{k[len("modules_"):]}': v for k, v in agent.low.network.params.items()},
                **{f'high/{k[len("modules_"):]}': v for k, v in agent.high.network.params.items()}}
    return {k[len('modules_'):]: v for k, v in agent.network.params.items()}


def with_module_params(agent, params):
    """`agent` with the online parameters {module name: parameters} (`module_params`' layout)."""
    if isinstance(agent, HierarchicalAgent):
        low = {f'modules_{k[4:]}': v for k, v in params.items() if k.startswith('low/')}
        high = {f'modules_{k[5:]}': v for k, v in params.items() if k.startswith('high/')}
        return agent.replace(low=agent.low.replace(network=agent.low.network.replace(params=low)),
                             high=agent.high.replace(network=agent.high.network.replace(params=high)))
    return agent.replace(network=agent.network.replace(params={f'modules_{k}': v for k, v in params.items()}))


def targets_of(agent):
    return agent.low.targets if isinstance(agent, HierarchicalAgent) else agent.targets


def with_targets(agent, targets):
    if isinstance(agent, HierarchicalAgent):
        return agent.replace(low=agent.low.replace(targets=targets))
    return agent.replace(targets=targets)


def metrics_of(agent, batch):
    """The metrics of the objective one update of `agent` minimises (a hierarchy's: both levels')."""
    if isinstance(agent, HierarchicalAgent):
        return agent.metrics(batch, NOISE_KEY)
    return agent.loss_fn(batch, NOISE_KEY)(agent.network.params)[1]


@dataclasses.dataclass
class Probe:
    case: Case
    agent: object  # random parameters and targets
    batch: dict  # random entries
    run: Callable  # (params, targets, batch) -> (values [terms + objective], gradients {module: tree [terms + 1, ...]})

    def __call__(self, params=None, targets=None, batch=None):
        values, grads = self.run(module_params(self.agent) if params is None else params,
                                 targets_of(self.agent) if targets is None else targets, self.batch if batch is None else batch)
        names = [name for name, _, _ in self.case.terms] + ['objective']
        values = dict(zip(names, np.asarray(values)))
        grads = {name: {module: jax.tree_util.tree_map(lambda g: np.asarray(g[k]), tree) for module, tree in grads.items()}
                 for k, name in enumerate(names)}
        return values, grads


@functools.cache
def probe(case_name) -> Probe:
    case = CASES[case_name]
    config, rng = case.config(), np.random.default_rng(0)
    # Random parameters instead of the agent's initialisation (checked below on its own): no initialiser to compile.
    agent, batch = random_agent(config, rng), random_batch(config, rng)
    keys = [key for _, key, _ in case.terms] + ['total_loss']

    def values_of(params, targets, batch):
        info = metrics_of(with_targets(with_module_params(agent, params), targets), batch)
        return jnp.stack([info[key] for key in keys])

    @jax.jit
    def run(params, targets, batch):
        values, pullback = jax.vjp(lambda p: values_of(p, targets, batch), params)
        return values, jax.vmap(pullback)(jnp.eye(len(keys)))[0]

    return Probe(case, agent, batch, run)


def nonzero(tree) -> bool:
    return any(np.any(leaf != 0) for leaf in jax.tree_util.tree_leaves(tree))


def same_tree(a, b) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))


def member(tree, m):
    return jax.tree_util.tree_map(lambda leaf: leaf[m], tree)


def redrawn(tree, rng, member_index=None):
    """`tree` with new random values (in member `member_index` only, if given)."""
    if member_index is None:
        return jax.tree_util.tree_map(lambda leaf: jnp.asarray(rng.normal(size=leaf.shape), leaf.dtype), tree)
    return jax.tree_util.tree_map(lambda leaf: leaf.at[member_index].set(rng.normal(size=leaf.shape[1:])), tree)


# ---------------------------------------------------------------------------------------------
# The tests.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize('case_name', CASES)
def test_each_loss_term_trains_exactly_its_modules(case_name):
    """Every term's gradient is exactly zero on the modules it must not train (the auxiliary loss on the actor head,
    an actor loss on the critic it reads, a level's loss on the other level) and not zero in any member of those it
    trains."""
    case = CASES[case_name]
    _, grads = probe(case_name)()
    for term, modules in case.trains.items():
        trained = {module for module, tree in grads[term].items() if nonzero(tree)}
        assert trained == modules, f'{case_name}: {term} trains {sorted(trained)}, not {sorted(modules)}'
        for module in modules & set(case.members):
            for m in range(case.members[module]):
                assert nonzero(member(grads[term][module], m)), f'{case_name}: {term} leaves {module} member {m} untrained'


@pytest.mark.parametrize('case_name', CASES)
def test_each_loss_term_enters_the_objective_with_its_weight(case_name):
    """The objective is the weighted sum of the terms (BC + alpha * L_aux, the RL terms' sum, FB's critic + actor), in
    value and in gradient: where one term alone trains a module, the objective's gradient there is exactly that term's
    times its weight (alpha, a power of two here); where several do, it is none of theirs alone."""
    case = CASES[case_name]
    values, grads = probe(case_name)()
    assert values['objective'] == case.expected_objective(values), (case_name, values)
    weights = {name: weight for name, _, weight in case.terms}
    for module in grads['objective']:
        by = [term for term, modules in case.trains.items() if module in modules]
        if len(by) == 1:
            expected = jax.tree_util.tree_map(lambda g: F32(weights[by[0]]) * g, grads[by[0]][module])
            assert_same_leaves(grads['objective'][module], expected, f'{case_name}: {module}, {by[0]} x {weights[by[0]]}')
        for term in by if len(by) > 1 else ():  # a module several terms train gets all their gradients
            weighted = jax.tree_util.tree_map(lambda g: F32(weights[term]) * g, grads[term][module])
            assert not same_tree(grads['objective'][module], weighted), f'{case_name}: {module} gets only {term}'


@pytest.mark.parametrize('case_name', CASES)
def test_each_loss_term_reads_its_batch_entries_and_target_networks(case_name):
    """A term's value or gradient moves when a batch entry or a target network it reads is redrawn, and both stay bit
    for bit when one it must not read is: which goals each loss gets, and that targets are read from the EMA copy."""
    case, probed, rng = CASES[case_name], probe(case_name), np.random.default_rng(1)
    base = probed()
    terms = [name for name, _, _ in case.terms]

    def readers(moved):
        return {term for term in terms if not same_term(moved, base, term)}

    for entry in probed.batch:
        moved = probed(batch=dict(probed.batch, **{entry: redrawn(probed.batch[entry], rng)}))
        expected = {term for term in terms if entry in case.reads.get(term, ())}
        assert readers(moved) == expected, f'{case_name}: {entry} is read by {sorted(readers(moved))}, not {sorted(expected)}'
    targets = targets_of(probed.agent)
    assert set(targets) == set().union(*case.target_reads.values())
    for name in targets:
        moved = probed(targets=dict(targets, **{name: redrawn(targets[name], rng)}))
        expected = {term for term in terms if name in case.target_reads.get(term, ())}
        assert readers(moved) == expected, f'{case_name}: target {name} is read by {sorted(readers(moved))}, not {sorted(expected)}'


def same_term(probed_a, probed_b, term):
    """Whether two probes gave `term` the same value and gradient, bit for bit."""
    (values_a, grads_a), (values_b, grads_b) = probed_a, probed_b
    return values_a[term] == values_b[term] and same_tree(grads_a[term], grads_b[term])


@pytest.mark.parametrize('case_name', [name for name, case in CASES.items() if case.members])
def test_ensemble_members_have_their_own_parameters_and_gradients(case_name):
    """Each ensemble module holds one parameter set per member; a term that trains the members one by one gives
    member 0 the same gradient bit for bit when member 1's parameters are redrawn (and member 1 another)."""
    case, probed, rng = CASES[case_name], probe(case_name), np.random.default_rng(2)
    params = module_params(probed.agent)
    for module, count in case.members.items():
        assert {leaf.shape[0] for leaf in jax.tree_util.tree_leaves(params[module])} == {count}, module
    _, grads = probed()
    shifted = dict(params, **{module: redrawn(params[module], rng, 1) for module, count in case.members.items() if count > 1})
    _, shifted_grads = probed(params=shifted)
    for term in case.separate:
        for module in case.members:
            assert_same_leaves(member(shifted_grads[term][module], 0), member(grads[term][module], 0),
                               f'{case_name}: {term} on {module} member 0 ')
            if module in case.trains[term] and case.members[module] > 1:  # the redrawn member's own gradient moved
                assert not same_tree(member(shifted_grads[term][module], 1), member(grads[term][module], 1))


def test_ensemble_members_start_from_their_own_initialisation():
    """The ensembles draw each member's initial weights on their own: no two members share a weight matrix (biases
    start at zero in every member). EnsembleEncoder's members are `ensemblize`d, as the value ensembles' and FB's
    forward maps are; EnsemblePredictor vmaps its members itself."""
    x, a, z = np.ones((3, OBS_DIM), np.float32), np.ones((3, ACTION_DIM), np.float32), np.ones((2, 3, 8), np.float32)
    networks = {'EnsembleEncoder': (EnsembleEncoder((8,), 8, 2, layer_norm=False), (x,)),
                'EnsemblePredictor': (EnsemblePredictor((8,), 8, 2, layer_norm=False), (z, a))}
    inits = jax.jit(lambda key: {name: net.init(key, *args)['params'] for name, (net, args) in networks.items()})(jax.random.PRNGKey(0))
    for name, params in inits.items():
        kernels = [leaf for path, leaf in jax.tree_util.tree_leaves_with_path(params) if 'kernel' in jax.tree_util.keystr(path)]
        assert kernels and all(leaf.shape[0] == 2 and not np.any(np.asarray(leaf[0] == leaf[1])) for leaf in kernels), name


# ---------------------------------------------------------------------------------------------
# One update is one optimizer step.
# ---------------------------------------------------------------------------------------------


def agent_and_batches(preset):
    config, rng = Case(preset, {}, (), {}, {}).config(), np.random.default_rng(1)
    return random_agent(config, rng), [random_batch(config, rng) for _ in range(2)]


def test_one_update_of_a_flat_agent_is_one_adam_step_of_its_loss_gradient():
    """Agent.update, which every flat agent runs: after a first update (so that Adam's moments are not zero), the next
    is exactly one optax Adam step on the gradient of the agent's loss, with the step counter and RNG advanced once
    (tests/agents/test_target_update.py: every agent with target networks, targets included)."""
    agent, (first, second) = agent_and_batches('gcbc')
    warm, _ = agent.update(first)
    assert_one_update(warm, second, *warm.update(second))


def test_one_update_of_a_hierarchy_is_one_adam_step_of_each_level():
    """HierarchicalAgent.update, both levels trained: the low level one Adam step of its own loss on the low goals,
    the high level one Adam step (at high_lr) of pi_h's loss, each counter advanced once."""
    agent, (first, second) = agent_and_batches('hgcbc')
    warm, _ = agent.update(first)
    updated, info = warm.update(second)
    assert_one_update(warm.low, warm.low_batch(second), updated.low)
    assert int(updated.high.network.step) == int(warm.high.network.step) + 1
    params, opt_state, metrics = high_level_update(warm.high, warm.low, second, warm.config['high_lr'])
    assert_same_leaves(updated.high.network.params, params, 'high-level parameters')
    assert_same_leaves(updated.high.network.opt_state, opt_state, 'high-level Adam state')
    assert_same_leaves({key: info[f'high_actor/{key}'] for key in metrics}, metrics, 'high-level metrics')


@functools.partial(jax.jit, static_argnums=3)
def high_level_update(high, low, batch, lr):
    """pi_h's parameters and Adam state after one optax Adam step at learning rate `lr` on the gradient of its loss,
    which reads the low level as it was before the step (the metrics and gradient norm computed as the update
    computes them: see tests/helpers.py, `ogbench_update`)."""
    grads, metrics = jax.grad(lambda params: high.loss(batch, params, low), has_aux=True)(high.network.params)
    metrics['grad_norm'] = optax.tree.norm(grads)
    updates, opt_state = optax.adam(lr).update(grads, high.network.opt_state, high.network.params)
    return optax.apply_updates(high.network.params, updates), opt_state, metrics
