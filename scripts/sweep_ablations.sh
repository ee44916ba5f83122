#!/usr/bin/env bash
# Ablations on the state datasets, each at every alpha of its method's sweep, with the paper's seed counts:
#  - BYOL-gamma ablations (paper Table "BYOL-gamma ablations"): -a, f_l2, -psi_b, gamma=0, -psi_b & gamma=0; 4 seeds;
#  - n-step BYOL^a, n = 1, 3, 5 (appendix "N-step BYOL"); 4 seeds;
#  - GCBC-phi (appendix "GCBC Encoder Ablation"), for which the paper gives no seed count: 4 seeds, like the other
#    ablations, and on antsoccer-arena-stitch too, a row the paper's GCBC-phi table does not have;
#  - FB, an RL method, at the paper's learning rates (appendix "Forward-Backward Algorithm"); 4 seeds;
#  - action conditioning (appendix "Ablations"): TRA^a and TD-SR (no action); 10 seeds.
# The paper's reference columns (BYOL-gamma^a, TRA, TD-SR^a, GCBC) come from the state sweep (10 seeds;
# the 4-seed tables use its first 4: scripts/results.py --runs=runs/state,runs/ablations --seeds=0-3). The
# paper's visual ablation rows are left out: the ablations have no _visual presets (docs/reproduce.md, section 6,
# says how to build them as method specs).
#   scripts/sweep_ablations.sh --dry_run
#   scripts/sweep_ablations.sh --backend=slurm --partition=gpu --seeds_per_job=4
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
BYOL_ALPHAS=alpha=1,6,40,100
ENVS=antmaze-medium-stitch-v0,antmaze-large-stitch-v0,humanoidmaze-medium-stitch-v0,humanoidmaze-large-stitch-v0,antsoccer-arena-stitch-v0
"$PY" scripts/sweep.py --name=ablations --envs=$ENVS --seeds=0-9 \
  --method=tra_a:alpha=10,40,60,100 \
  --method=tdsr:alpha=0.01,0.05,0.001,0.005 \
  "$@"
exec "$PY" scripts/sweep.py --name=ablations --envs=$ENVS --seeds=0-3 \
  --method=byol_gamma_no_a:$BYOL_ALPHAS \
  --method=byol_gamma_l2:$BYOL_ALPHAS \
  --method=byol_gamma_no_psi_b:$BYOL_ALPHAS \
  --method=byol_gamma_gamma0:$BYOL_ALPHAS \
  --method=byol_gamma_no_psi_b_gamma0:$BYOL_ALPHAS \
  --method=byol_nstep1_a:$BYOL_ALPHAS \
  --method=byol_nstep3_a:$BYOL_ALPHAS \
  --method=byol_nstep5_a:$BYOL_ALPHAS \
  --method=gcbc_phi \
  --method=fb:lr=1e-4,1e-5,1e-6 \
  "$@"
