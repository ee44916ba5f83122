#!/usr/bin/env bash
# Main table, state-based datasets (paper Table "OGBench", 10 seeds, 1M steps, batch 1024): every
# method at each alpha of its paper sweep; scripts/results.py then reports the best alpha per dataset.
#   scripts/sweep_state.sh --dry_run
#   scripts/sweep_state.sh --backend=local --workers=4
#   scripts/sweep_state.sh --backend=slurm --partition=gpu --time_min=1440 --seeds_per_job=5
# Arguments go to scripts/sweep.py (later ones win; `-- --flag=value` adds main.py flags).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
exec "$PY" scripts/sweep.py \
  --name=state \
  --envs=antmaze-medium-stitch-v0,antmaze-large-stitch-v0,humanoidmaze-medium-stitch-v0,humanoidmaze-large-stitch-v0,antsoccer-arena-stitch-v0 \
  --seeds=0-9 \
  --method=byol_gamma_a:alpha=1,6,40,100 \
  --method=byol:alpha=1,6,40,100 \
  --method=tra:alpha=10,40,60,100 \
  --method=tdsr_a:alpha=0.01,0.05,0.001,0.005 \
  --method=gcbc \
  "$@"
