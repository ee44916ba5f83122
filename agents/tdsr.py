"""TD-SR: GCBC + alpha * a temporal-difference successor-representation loss.

    L_aux = E_{s_t, s'}[(psi(s_t)^T phi(s') - gamma psibar(s_{t+1})^T phibar(s'))^2]
            - 2 E[psi(s_t)^T phi(s_{t+1})]                      (paper, eq. tdsr)

with EMA targets (psibar, phibar; tau = 0.005) and s' the other samples' next states. psi is a
separate encoder ensemble of raw states; TD-SR^a (`action_conditioned`) uses psi(s_t, a_t) and
psibar(s_{t+1}, a_{t+1}) with the dataset's next action (the SR of the behavior policy). The policy is
pi(phi(s), phi(g)) in both variants. Each ensemble member has its own loss; L_aux combines them.

Loss scale (`loss_scale`, see utils.losses.td_sr_loss), with td_e / diag_e the squared / diagonal
terms of member e:
* 'authors' (default): the authors' public implementation, on which the paper's alpha grid
  (0.001, 0.005, 0.01, 0.05) was tuned: L_aux = 1/2 sum_e td_e - mean_e diag_e, i.e. for the 2
  members mean_e (td_e - diag_e), half the printed weight on the diagonal.
* 'paper': the printed equation, L_aux = mean_e (td_e - 2 diag_e).
Two further options of the authors' code, both off by default because the authors' documented
TD-SR command (and the paper's TD-SR appendix) turns them off, though their code defaults them on:
* `normalize_goal`: the goal-side phi(s_{t+1}), phibar(s_{t+1}) and the actor's goal input phi(g)
  rescaled to norm sqrt(d) per member (their `normalize_psi`); the actor's state input stays raw.
* `ortho_coef` > 0: + ortho_coef * orthonormality regulariser on phi(s_{t+1})
  (utils.losses.orthonormality_loss, the authors' 'all_entries' form under 'authors', the
  ||E[phi phi^T] - I||^2 'frobenius' form under 'paper'); their code's default is 1.
"""

import ml_collections
import optax

from agents.base import TARGET_RULES, BCAgent, encoder_fields, mean_concat
from agents.two_encoders import psi_inputs, two_encoder_modules
from utils.config_checks import DISCOUNT_RULE, at_least, non_negative, one_of, switch
from utils.losses import orthonormality_loss, td_sr_loss
from utils.networks import length_normalize
from utils.training import goal_mixture


class TDSRAgent(BCAgent):
    CONFIG_RULES = {
        **TARGET_RULES,
        'batch_size': at_least(2, 1024),  # the TD loss pairs each sample with the others
        'loss_scale': one_of('authors', 'paper'),
        'ortho_coef': non_negative(0.0),
        'action_conditioned': switch(True),
        'normalize_goal': switch(False),
        'discount': DISCOUNT_RULE,  # the TD target's
    }

    def encodes(self):
        """phi of s_t, the actor goals and s_{t+1}."""
        return ('observations', 'actor_goals', 'next_observations')

    def actor_input(self, batch, z):
        return mean_concat(z['observations'], self.goal_side(z['actor_goals']))

    def goal_side(self, z):
        """A goal-side representation phi(x) (or phibar(x)), rescaled to norm sqrt(d) with `normalize_goal`."""
        return length_normalize(z) if self.config['normalize_goal'] else z

    def goal_encode(self, x, params):
        return self.goal_side(self.network(x, name='encoder', params=params))

    def psi_inputs(self, observations, actions):
        return psi_inputs(observations, actions, self.config['action_conditioned'])

    def representation_loss(self, batch, z, params):
        psi = self.network(*self.psi_inputs(batch['observations'], batch['actions']), name='psi_encoder', params=params)
        phi_next = self.goal_side(z['next_observations'])
        next_psi_inputs = self.psi_inputs(batch['next_observations'], batch['next_actions'])
        target_psi_next = self.target(*next_psi_inputs, name='psi_encoder')
        target_phi_next = self.goal_side(self.target(batch['next_observations'], name='encoder'))
        scale = self.config['loss_scale']
        loss, info = td_sr_loss(psi, phi_next, target_psi_next, target_phi_next, self.config['discount'], scale=scale)
        if self.config['ortho_coef'] > 0:
            form = 'all_entries' if scale == 'authors' else 'frobenius'
            ortho, _ = orthonormality_loss(phi_next, form=form)
            info['ortho_loss'] = ortho
            loss = loss + self.config['ortho_coef'] * ortho
        return loss, info

    def representations(self, observations, actions, goals):
        params = self.network.params
        psi = self.network(*self.psi_inputs(observations, actions), name='psi_encoder', params=params)
        return psi.mean(0), self.goal_encode(goals, params).mean(0)

    @classmethod
    def build(cls, seed, ex_observations, ex_actions, config):
        modules, example_args = two_encoder_modules(config, ex_observations, ex_actions)
        return cls.from_modules(seed, modules, example_args, config, optax.adam(config.lr),
                                targets=('encoder', 'psi_encoder'))


AGENTS = {'tdsr': TDSRAgent}  # agent_name -> class, found by agents.get_agent_class


def get_config():
    return ml_collections.ConfigDict(
        dict(
            agent_name='tdsr',  # Agent name (registry key).
            lr=3e-4,  # Adam learning rate.
            batch_size=1024,  # Batch size (B^2 TD pairs per member).
            frame_stack=1,  # Observations are the channel-wise stack of the last this many frames (pixels; 1 = none).
            p_aug=0.0,  # Probability of random-crop augmentation of a batch (pixels; OGBench visual: 0.5).
            **encoder_fields(),  # phi, psi and the actor head (agents/base.py, ENCODER_FIELDS).
            alpha=0.01,  # Weight of the representation loss (paper sweeps 0.001, 0.005, 0.01, 0.05).
            tau=0.005,  # EMA rate of the target encoders: target <- tau * online + (1 - tau) * target.
            action_conditioned=True,  # TD-SR^a: psi(s_t, a_t) (the paper's main-table variant).
            discount=0.99,  # gamma of the TD target.
            loss_scale='authors',  # 'authors': 1/2 sum_e td_e - mean_e diag_e (the alpha grid's scale); 'paper': as printed.
            normalize_goal=False,  # Rescale goal-side phi to norm sqrt(d) (authors' code default; off in their TD-SR command).
            ortho_coef=0.0,  # Weight of an orthonormality regulariser on phi (authors' code default 1; 0 in their command).
            goal_rule='ogbench',  # Trajectory goals drawn as OGBench's GCDataset draws them ('last_row': up to the episode's last state).
            **goal_mixture('actor'),  # Actor goals: uniform over the trajectory's future (OGBench GCBC).
        )
    )
