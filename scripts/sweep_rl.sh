#!/usr/bin/env bash
# Offline RL baselines (GCIVL, GCIQL, QRL, CRL, HIQL) on the main table's state-based datasets, in this
# codebase: 1M steps, batch 1024, 10 seeds, each dataset with its family's preset, i.e. OGBench's
# per-environment hyperparameters (configs/presets.py). OGBench fixes those per environment rather than
# sweeping them, so there is no grid: one setting per agent and dataset, as the paper quotes OGBench.
# scripts/results.py lists each agent's family presets under one column (GCIVL, ..., HIQL), unbolded.
#   scripts/sweep_rl.sh --dry_run
#   scripts/sweep_rl.sh --backend=slurm --partition=gpu --time_min=1440 --seeds_per_job=5
# Arguments go to scripts/sweep.py (later ones win; `-- --flag=value` adds main.py flags).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
AGENTS=(gcivl gciql qrl crl hiql)
run_family() {  # family, comma-separated datasets, then the script's arguments
  local family=$1 envs=$2
  shift 2
  local methods=()
  for agent in "${AGENTS[@]}"; do methods+=("--method=${agent}_${family}"); done
  "$PY" scripts/sweep.py --name=state_rl --envs="$envs" --seeds=0-9 "${methods[@]}" "$@"
}
run_family antmaze antmaze-medium-stitch-v0,antmaze-large-stitch-v0 "$@"
run_family humanoidmaze humanoidmaze-medium-stitch-v0,humanoidmaze-large-stitch-v0 "$@"
run_family antsoccer antsoccer-arena-stitch-v0 "$@"
