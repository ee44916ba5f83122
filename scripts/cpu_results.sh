#!/usr/bin/env bash
# A CPU-sized version of the paper's comparison on pointmaze-medium-stitch (the dataset this
# project generates offline), then the results table. Budget per run: 6k gradient steps at batch
# 256, 2 seeds (vmapped in one process), evaluation every 2k steps with 20 episodes per task; the
# score is the mean of the 3 evaluations. One alpha per method (BYOL-gamma 1 and 6, TRA 10, TD-SR
# 0.01); HBYOL-gamma splits the 6k steps 3k + 3k. About 45 minutes on 2 CPU cores.
#   bash scripts/cpu_results.sh [--workers=2] [extra scripts/sweep.py flags] [-- main.py flags, which win]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
"$PY" scripts/sweep.py --name=cpu_table --envs=pointmaze-medium-stitch-v0 --seeds=0-1 --seeds_per_job=2 \
  --method=gcbc --method=gcbc_phi --method=byol --method=byol_gamma_a:alpha=1,6 --method=tra:alpha=10 \
  --method=tdsr_a:alpha=0.01 --method=fb --method=hgcbc --method=hbyol_gamma_a:stage1_steps=3000 \
  --backend=local \
  --main_flags="--train_steps=6000 --agent.batch_size=256 --log_interval=500 --eval_interval=2000 --save_interval=2000 \
--eval_episodes=20 --wandb_mode=offline" \
  "$@"
case " $* " in *" --dry_run "* | *" --help "* | *" -h "*) exit 0 ;; esac  # no table of runs not run
"$PY" scripts/results.py --runs=runs/cpu_table --format=markdown
