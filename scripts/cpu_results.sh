#!/usr/bin/env bash
# A CPU-sized version of the paper's main comparison on pointmaze-medium-stitch (the dataset this
# project generates offline). Budget: 10k gradient steps at batch 256, 2 seeds per method (vmapped
# in one process), evaluation every 2.5k steps with 20 episodes per task; one alpha per method
# (BYOL-gamma 1 and 6, TRA 10, TD-SR 0.01). About 40 minutes on 2 CPU cores. Then prints the table.
#   bash scripts/cpu_results.sh [extra main.py flags]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
ENV=pointmaze-medium-stitch-v0
GROUP=cpu_table
COMMON=(--env_name=$ENV --run_group=$GROUP --num_seeds=2 --train_steps=10000 --agent.batch_size=256
        --log_interval=500 --eval_interval=2500 --save_interval=5000 --eval_episodes=20 --wandb_mode=offline --resume)
run() {  # run <preset> <alpha or -> [flags]
  local preset=$1 alpha=$2; shift 2
  local name=${preset}_${ENV}_a${alpha}
  local alpha_flag=(); [ "$alpha" != "-" ] && alpha_flag=(--agent.alpha=$alpha)
  if [ -e "runs/$GROUP/${name}_sd0/DONE" ] && [ -e "runs/$GROUP/${name}_sd1/DONE" ]; then echo "done: $name"; return; fi
  "$PY" main.py --agent=configs/presets.py:$preset --run_name=$name "${alpha_flag[@]}" "${COMMON[@]}" "$@"
}
run gcbc - "$@"
run gcbc_phi - "$@"
run byol - --agent.alpha=1 "$@"
run byol_gamma_a 1 "$@"
run byol_gamma_a 6 "$@"
run tra 10 "$@"
run tdsr_a 0.01 "$@"
"$PY" scripts/results.py --runs=runs/$GROUP --format=markdown
