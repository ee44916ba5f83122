"""BYOL-gamma in a finite MDP: the spectral and mixture-data checks (library: experiments/finite_mdp.py).

    python scripts/finite_mdp.py          # default setting, < 1 min on 2 CPU cores
    python scripts/finite_mdp.py --fast   # the setting the tests use
"""

from experiments.finite_mdp import main

if __name__ == '__main__':
    main()
