#!/usr/bin/env bash
# The offline RL baselines at the CPU table's budget (scripts/cpu_results.sh): pointmaze-medium-stitch
# (generated offline), 6k gradient steps at batch 256, 2 seeds vmapped in one process, evaluation every
# 2k steps with 20 episodes per task, OGBench's pointmaze hyperparameters (presets <agent>_pointmaze).
# These agents are 3-5x heavier per step than GCBC (value ensembles, targets): about 40 min per agent on
# 2 busy CPU cores, a few minutes on one GPU. Then the table of these runs and cpu_results.sh's together.
#   bash scripts/cpu_results_rl.sh [--workers=2] [extra scripts/sweep.py flags] [-- main.py flags, which win]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
"$PY" scripts/sweep.py --name=cpu_table --envs=pointmaze-medium-stitch-v0 --seeds=0-1 --seeds_per_job=2 \
  --method=gcivl_pointmaze --method=gciql_pointmaze --method=qrl_pointmaze --method=crl_pointmaze --method=hiql_pointmaze \
  --backend=local \
  --main_flags="--train_steps=6000 --agent.batch_size=256 --log_interval=500 --eval_interval=2000 --save_interval=2000 \
--eval_episodes=20 --wandb_mode=offline" \
  "$@"
case " $* " in *" --dry_run "* | *" --help "* | *" -h "*) exit 0 ;; esac  # no table of runs not run
"$PY" scripts/results.py --runs=runs/cpu_table --format=markdown --ci
