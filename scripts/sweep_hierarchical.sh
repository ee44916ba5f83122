#!/usr/bin/env bash
# Hierarchical policies (paper appendix "Hierarchical Policies", 4 seeds) on the state maze datasets:
# HGCBC, and HBYOL-gamma^a at each BYOL-gamma alpha (its presets set the paper's high-level lr 1e-4
# and split the 1M steps between the two stages). The table's GCBC and BYOL-gamma^a columns are the
# first 4 seeds of the state sweep: scripts/results.py --runs=runs/state,runs/hierarchical --seeds=0-3.
# HGCBC-phi and the visual rows: the presets hgcbc_phi_visual and hbyol_gamma_a_visual exist, and no script runs
# them; docs/reproduce.md, section 6, gives the sweep command.
#   scripts/sweep_hierarchical.sh --dry_run
#   scripts/sweep_hierarchical.sh --backend=slurm --partition=gpu --seeds_per_job=4
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
exec "$PY" scripts/sweep.py \
  --name=hierarchical \
  --envs=antmaze-medium-stitch-v0,antmaze-large-stitch-v0,humanoidmaze-medium-stitch-v0,humanoidmaze-large-stitch-v0 \
  --seeds=0-3 \
  --method=hgcbc \
  --method=hbyol_gamma_a:alpha=1,6,40,100 \
  "$@"
