"""FB: zero-shot forward-backward RL used for goal reaching (paper appendix "Forward-Backward Algorithm").

Unlike the other agents this is not GCBC + alpha * L_aux: the policy pi(s, z) is trained by RL on the
successor measure M^{pi_z}(s, a, s+) = F(s, a, z)^T B(s+) p(s+), and reaches goal g with z = B(g).
Per gradient step, on one batch and one parameter tree:

* z: for each sample, with probability `z_state_ratio` the backward embedding B(s) of a random
  dataset state (the batch's `value_goals`, drawn uniformly from the dataset), otherwise a uniform
  sample from the sphere of radius sqrt(d); z is stop-gradient.
* critic: `utils.losses.forward_backward_loss` on (F, B) with EMA targets (Fbar, Bbar) and the target
  action pi(s_{t+1}, z) plus clipped noise, plus `ortho_coef` times the orthonormality regulariser.
* actor: -Q + bc_coef * L_BC, Q = F(s, pi(s, z) + noise, z)^T z (DDPG / TD3 with a BC term).

Choices, following Meta Motivo's FB (Tirinzoni et al. 2025) unless noted:
* B(s) is an MLP projected onto the sphere of radius sqrt(d) (their `Norm` layer, also in Touati et
  al.'s code), so B(g), B(dataset state) and the sphere samples all live on the same sphere.
* F is an ensemble of 2 networks (their `num_parallel = 2`); each embeds (s, a) and (s, z) separately,
  the two embeddings are concatenated and mapped to the latent. With hidden sizes (h_1, .., h_n) the
  embeddings are MLPs (h_1, .., h_{n-2}, h_{n-1} / 2) and the trunk is MLP(h_n), so (64, 64, 64)
  gives their layout (embeddings 64 -> 32 each, trunk 64) at this project's widths. The TD target
  uses the ensemble mean; the actor is pessimistic, Q = mean_e Q_e - `actor_pessimism` * |Q_1 - Q_2|.
  Hidden layers use this project's MLP (GELU + layer norm) rather than their tanh/ReLU mix.
* The actor is this project's Gaussian actor head on concat(s, z); its action is tanh(mean), with
  Gaussian noise (std `actor_noise`, clipped at `actor_noise_clip`) in the actor loss and the TD
  target (TD3 smoothing; their TruncatedNormal with std 0.2, clip 0.3), clipped to [-1, 1] with a
  straight-through gradient. Evaluation (temperature 0) uses tanh(mean).
* BC term (the paper's addition, coefficient 1): log-likelihood of the dataset action under
  N(tanh(mean), I), i.e. 0.5 * ||a - pi(s, z)||^2 + const, with the same z as the RL term. Q is used
  raw, as in Meta Motivo and as "coefficient 1" reads; M is of order 1 / (1 - gamma), so BC is a
  light regulariser. `normalize_q` divides Q by sg(mean |Q|) instead (TD3+BC), which lets BC
  dominate, so that the policy can learn to ignore z.
* Loss scale (`loss_scale`): 'metamotivo' (default) is Meta Motivo's, which the paper's FB appendix
  follows: TD loss 1/2 sum_e td_e - sum_e mean_i (M_e - T)_ii (the same gradients as 'paper' for 2
  members) and orthonormality regulariser 1/2 E_{i != j}[(B_i . B_j)^2] - E_i[|B_i|^2] with
  `ortho_coef` = 1 (their default). 'paper': mean_e of the TD-SR-style equation and the
  ||E[B B^T] - I||^2 form (twice Meta Motivo's); the paper writes no orthonormality term, so its
  printed form is `loss_scale=paper ortho_coef=0`. See utils.losses.forward_backward_loss and
  orthonormality_loss.
* EMA rate tau = 0.01 (their `fb_target_tau`), lr 1e-4 (the paper sweeps 1e-4, 1e-5, 1e-6).

Expect `critic/m_diag_mean` = M(s_t, a_t, s_{t+1}) to keep growing, and to grow far above the
off-diagonal mean, on continuous, deterministic dynamics such as pointmaze: the true successor measure
has a Dirac mass at s_{t+1}, so only the networks' smoothness bounds it. The critic loss therefore
keeps decreasing below zero; it is no convergence signal.
"""

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import optax

from agents.base import ENCODER_RULES, TARGET_RULES, Agent, LossFn, bc_loss, frozen, latent_dim_for
from utils.config_checks import Rule, at_least, non_negative, one_of, probability, switch
from utils.image_encoders import visual_encoder
from utils.losses import forward_backward_loss, orthonormality_loss
from utils.networks import MLP, Encoder, GaussianActor, default_init, ensemblize
from utils.training import BatchSpec, goal_mixture

# Under the square root of the norm, so that projecting a zero vector gives 0 instead of NaN.
SPHERE_EPS = 1e-12


def project_to_sphere(x):
    """x scaled to norm sqrt(d), d = x.shape[-1]."""
    d = x.shape[-1]
    return jnp.sqrt(d) * x / jnp.sqrt(jnp.sum(jnp.square(x), axis=-1, keepdims=True) + SPHERE_EPS)


class ForwardMap(nn.Module):
    """F(s, a, z): embeddings of (s, a) and (s, z), concatenated, then a trunk to the latent."""

    hidden_dims: Sequence[int]
    latent_dim: int
    layer_norm: bool = True
    visual_encoder: str = 'none'  # image encoder applied to the observations first (pixels)

    @nn.compact
    def __call__(self, observations, actions, latents):
        if self.visual_encoder != 'none':
            observations = visual_encoder(self.visual_encoder)(observations)
        *embedding_dims, trunk_dim = self.hidden_dims
        embedding_dims = (*embedding_dims[:-1], embedding_dims[-1] // 2)
        state_action = MLP(embedding_dims, activate_final=True, layer_norm=self.layer_norm)(
            jnp.concatenate([observations, actions], axis=-1)
        )
        state_latent = MLP(embedding_dims, activate_final=True, layer_norm=self.layer_norm)(
            jnp.concatenate([observations, latents], axis=-1)
        )
        x = MLP((trunk_dim,), activate_final=True, layer_norm=self.layer_norm)(
            jnp.concatenate([state_action, state_latent], axis=-1)
        )
        return nn.Dense(self.latent_dim, kernel_init=default_init())(x)


class BackwardMap(nn.Module):
    """B(s): an encoder MLP whose output is projected onto the sphere of radius sqrt(d)."""

    hidden_dims: Sequence[int]
    latent_dim: int
    layer_norm: bool = True
    visual_encoder: str = 'none'  # image encoder applied to the observations first (pixels)

    @nn.compact
    def __call__(self, x):
        if self.visual_encoder != 'none':
            x = visual_encoder(self.visual_encoder)(x)
        return project_to_sphere(Encoder(self.hidden_dims, self.latent_dim, self.layer_norm)(x))


def pessimistic_mean(values, penalty):
    """mean_e v_e - penalty * mean_{e != e'} |v_e - v_e'| over the ensemble axis 0 (Meta Motivo's
    `get_targets_uncertainty`); for one member, the value itself."""
    members = values.shape[0]
    if members == 1:
        return values[0]
    spread = jnp.sum(jnp.abs(values[:, None] - values[None, :]), axis=(0, 1)) / (members * (members - 1))
    return jnp.mean(values, axis=0) - penalty * spread


class FBAgent(Agent):
    CONFIG_RULES = {
        # The BC agents' encoder fields it reads (its own get_config declares them, with what they mean for F and B).
        **{field: ENCODER_RULES[field] for field in ('encoder', 'encoder_layer_norm', 'latent_dim', 'actor_hidden_dims',
                                                     'actor_layer_norm')},
        **TARGET_RULES,
        # F's (s, a) and (s, z) embeddings take all hidden sizes but the last, the trunk the last one.
        'encoder_hidden_dims': Rule(lambda v: len(v) >= 2 and all(isinstance(d, int) and d >= 1 for d in v),
                                    'must hold at least 2 positive layer sizes (embeddings, then trunk)', (64, 64, 64)),
        'batch_size': at_least(2, 1024),  # the TD loss pairs each sample with the others in its batch
        'loss_scale': one_of('metamotivo', 'paper'),
        'num_forward': at_least(1, 2),
        'z_state_ratio': probability(0.5),
        'ortho_coef': non_negative(1.0),
        'bc_coef': non_negative(1.0),
        'actor_pessimism': non_negative(0.5),
        'actor_noise': non_negative(0.2),
        'actor_noise_clip': non_negative(0.3),
        'normalize_q': switch(True),
    }
    BATCH = BatchSpec(goals=(('value', 'the states z = B(s) is drawn from'),), reads=('frame_stack', 'p_aug'))

    def policy_inputs(self, observations, goals, params):
        """Goal reaching: the actor on concat(s, z) with z = B(g)."""
        return self.policy_features(observations, self.network(goals, name='backward', params=params), params)

    def policy_features(self, observations, latents, params):
        """The actor's input concat(s, z); with pixels, s is first encoded by the actor's own image encoder."""
        if self.config['encoder'] != 'none':
            observations = self.network(observations, name='actor_encoder', params=params)
        return jnp.concatenate([observations, latents], axis=-1)

    def policy_actions(self, observations, latents, params):
        """(pi(s, z) = tanh(mean), log_stds)."""
        return self.actor_head(self.policy_features(observations, latents, params), params)

    def actor_head(self, inputs, params):
        """The actor on concat(s, z): (tanh(mean), log_stds)."""
        means, log_stds = self.network(inputs, name='actor', params=params)
        return jnp.tanh(means), log_stds

    def smoothed(self, actions, noise_key):
        """actions + clipped Gaussian noise, clipped to [-1, 1] with a straight-through gradient so that
        the actor still learns at the action bounds."""
        noise = self.config['actor_noise'] * jax.random.normal(noise_key, actions.shape)
        noisy = actions + jnp.clip(noise, -self.config['actor_noise_clip'], self.config['actor_noise_clip'])
        return noisy + jax.lax.stop_gradient(jnp.clip(noisy, -1.0, 1.0) - noisy)

    def sample_latents(self, key, states, params):
        """z per sample: B(states) with probability `z_state_ratio`, else uniform on the sphere of
        radius sqrt(d). Stop-gradient: z is an input of F and pi, not something B is trained through."""
        sphere_key, choice_key = jax.random.split(key)
        from_states = self.network(states, name='backward', params=params)
        from_sphere = project_to_sphere(jax.random.normal(sphere_key, from_states.shape))
        use_states = jax.random.uniform(choice_key, (from_states.shape[0], 1)) < self.config['z_state_ratio']
        return jax.lax.stop_gradient(jnp.where(use_states, from_states, from_sphere))

    def critic_loss(self, batch, params, latents, noise_key):
        """FB TD loss (+ orthonormality); trains F and B only."""
        next_actions, _ = self.policy_actions(batch['next_observations'], latents, frozen(params))
        next_actions = self.smoothed(next_actions, noise_key)
        target_forward = self.target(batch['next_observations'], next_actions, latents, name='forward')
        target_backward = self.target(batch['next_observations'], name='backward')
        forward = self.network(batch['observations'], batch['actions'], latents, name='forward', params=params)
        backward = self.network(batch['next_observations'], name='backward', params=params)
        scale = self.config['loss_scale']
        loss, info = forward_backward_loss(forward, backward, target_forward, target_backward, self.config['discount'], scale)
        ortho, ortho_info = orthonormality_loss(backward, form='metamotivo' if scale == 'metamotivo' else 'frobenius')
        info = {f'critic/{k}': v for k, v in info.items()}
        info.update({'critic/fb_loss': loss, 'critic/ortho_loss': ortho, 'critic/ortho_offdiag': ortho_info['offdiag']})
        return loss + self.config['ortho_coef'] * ortho, info

    def actor_loss(self, batch, params, latents, noise_key):
        """-Q (/ sg(mean |Q|) with `normalize_q`) + bc_coef * L_BC. F is read with stop-gradient
        parameters, so this loss trains the actor only (z is already stop-gradient)."""
        actions, log_stds = self.policy_actions(batch['observations'], latents, params)
        smoothed = self.smoothed(actions, noise_key)
        forward = self.network(batch['observations'], smoothed, latents, name='forward', params=frozen(params))
        q = pessimistic_mean(jnp.sum(forward * latents, axis=-1), self.config['actor_pessimism'])
        q_scale = jax.lax.stop_gradient(jnp.mean(jnp.abs(q))) if self.config['normalize_q'] else 1.0
        q_loss = -jnp.mean(q) / jnp.maximum(q_scale, 1e-6)
        bc = bc_loss(actions, log_stds, batch['actions'])
        info = {
            'actor/q_loss': q_loss,
            'actor/q': jnp.mean(q),
            'actor/bc_loss': bc,
            'actor/mse': jnp.mean((actions - batch['actions']) ** 2),
        }
        return q_loss + self.config['bc_coef'] * bc, info

    def total_loss(self, batch, params, rng):
        """Critic + actor loss; each trains its own networks (F, B) and pi; `rng` draws z and the noise."""
        latent_key, target_noise_key, actor_noise_key = jax.random.split(rng, 3)
        latents = self.sample_latents(latent_key, batch['value_goals'], params)
        critic, info = self.critic_loss(batch, params, latents, target_noise_key)
        actor, actor_info = self.actor_loss(batch, params, latents, actor_noise_key)
        info.update(actor_info)
        info['critic/loss'] = critic
        info['total_loss'] = critic + actor
        return critic + actor, info

    def loss_fn(self, batch, rng) -> LossFn:
        return lambda params: self.total_loss(batch, params, rng)

    @jax.jit
    def sample_actions(self, observations, goals, seed=None, temperature=1.0):
        """pi(s, B(g)) = tanh(mean), plus N(0, (temperature * actor_noise)^2) noise, clipped to [-1, 1]."""
        params = self.network.params
        actions, _ = self.actor_head(self.policy_inputs(observations, goals, params), params)
        seed = self.rng if seed is None else seed
        noise = temperature * self.config['actor_noise'] * jax.random.normal(seed, actions.shape)
        return jnp.clip(actions + noise, -1.0, 1.0)

    def representations(self, observations, actions, goals):
        """(mean_e F_e(s, a, B(g)), B(g)): their dot product is the successor measure M(s, a, g)."""
        params = self.network.params
        latents = self.network(goals, name='backward', params=params)
        return self.network(observations, actions, latents, name='forward', params=params).mean(axis=0), latents

    @classmethod
    def build(cls, seed, ex_observations, ex_actions, config):
        action_dim = ex_actions.shape[-1]
        d = latent_dim_for(config, ex_observations)
        forward = ensemblize(ForwardMap, config.num_forward)(config.encoder_hidden_dims, d, config.encoder_layer_norm, config.encoder)
        backward = BackwardMap(config.encoder_hidden_dims, d, config.encoder_layer_norm, config.encoder)
        ex_latents = jnp.zeros((ex_observations.shape[0], d))
        ex_actor_features = ex_observations
        modules = {
            'forward': forward,
            'backward': backward,
            'actor': GaussianActor(config.actor_hidden_dims, action_dim, layer_norm=config.actor_layer_norm),
        }
        example_args = {
            'forward': (ex_observations, ex_actions, ex_latents),
            'backward': (ex_observations,),
        }
        if config.encoder != 'none':  # the actor's own CNN, trained by the actor loss
            modules['actor_encoder'] = visual_encoder(config.encoder)
            example_args['actor_encoder'] = (ex_observations,)
            ex_actor_features = jnp.zeros(jax.eval_shape(modules['actor_encoder'].init_with_output, jax.random.PRNGKey(0), ex_observations)[0].shape)
        example_args['actor'] = (jnp.concatenate([ex_actor_features, ex_latents], axis=-1),)
        return cls.from_modules(seed, modules, example_args, config, optax.adam(config.lr), targets=('forward', 'backward'))


AGENTS = {'fb': FBAgent}  # agent_name -> class, found by agents.get_agent_class


def get_config():
    return ml_collections.ConfigDict(
        dict(
            agent_name='fb',  # Agent name (registry key).
            lr=1e-4,  # Adam learning rate of F, B and the actor (paper sweeps 1e-4, 1e-5, 1e-6).
            batch_size=1024,  # Batch size (B^2 TD pairs per forward member).
            frame_stack=1,  # Observations are the channel-wise stack of the last this many frames (pixels; 1 = none).
            p_aug=0.0,  # Probability of random-crop augmentation of a batch (pixels; OGBench visual: 0.5).
            actor_hidden_dims=(512, 512, 512),  # Actor head MLP hidden sizes (input concat(s, z)).
            actor_layer_norm=False,  # Layer norm in the actor MLP.
            encoder='none',  # 'none': F, B, pi read states; 'impala_small': each has its own OGBench CNN first (pixels).
            encoder_hidden_dims=(64, 64, 64),  # F and B hidden sizes; F: (s,a) and (s,z) embeddings (all but last, last halved), trunk (last).
            encoder_layer_norm=True,  # Layer norm in F's and B's hidden layers.
            latent_dim=0,  # d, size of z, F and B; 0 = |s| (64 when |s| < 8, e.g. pointmaze).
            num_forward=2,  # Forward ensemble members (Meta Motivo: 2); B is a single network.
            tau=0.01,  # EMA rate of Fbar, Bbar: target <- tau * online + (1 - tau) * target.
            discount=0.99,  # gamma of the successor measure.
            z_state_ratio=0.5,  # Fraction of training z that are B(dataset state); the rest are uniform on the sphere.
            ortho_coef=1.0,  # Weight of the orthonormality regulariser on B (Meta Motivo: 1; 0 = as printed in the paper).
            loss_scale='metamotivo',  # 'metamotivo': Meta Motivo's TD and orthonormality scales; 'paper': printed TD form.
            bc_coef=1.0,  # Weight of the BC log-likelihood in the actor loss (paper: 1).
            normalize_q=False,  # Divide the actor's -Q by sg(mean |Q|) (TD3+BC); off: raw Q as in Meta Motivo.
            actor_pessimism=0.5,  # Actor's Q = mean_e Q_e - this * mean pairwise |Q_e - Q_e'| (Meta Motivo: 0.5).
            actor_noise=0.2,  # Std of the policy-smoothing noise in actor and TD target (also temperature 1 sampling).
            actor_noise_clip=0.3,  # Clip of that noise.
            goal_rule='ogbench',  # Trajectory goals drawn as OGBench's GCDataset draws them ('last_row': up to the episode's last state).
            **goal_mixture('value', p_trajgoal=0.0, p_randomgoal=1.0),  # States seeding z = B(s): random (Meta Motivo: shuffled batch).
        )
    )
