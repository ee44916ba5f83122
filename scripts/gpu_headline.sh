#!/usr/bin/env bash
# The paper's headline row on one GPU machine: GCBC vs BYOL-gamma^a on antmaze-medium-stitch, each
# method's seeds vmapped in one process, both methods at once (they share the GPU; evaluation uses
# the CPU cores). The dataset is generated offline with the project's ant expert if it is missing.
#   bash scripts/gpu_headline.sh [train_steps] [num_seeds] [eval_episodes] [dataset_episodes]
# Defaults: 100k steps (a tenth of the paper's 1M), 4 seeds, 20 episodes per task, 1000 episodes of
# data (OGBench's file has 5000; pass 5000 for the full size, about 11 min to generate on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
STEPS=${1:-100000}
SEEDS=${2:-4}
EPISODES=${3:-20}
DATA_EPISODES=${4:-1000}
ENV=antmaze-medium-stitch-v0
DATA=${DATASET_DIR:-data/headline}
OUT=${SAVE_DIR:-runs}
if [ ! -f "$DATA/$ENV.npz" ]; then
  "$PY" scripts/generate_dataset.py --env_name=$ENV --dataset_dir="$DATA" --num_episodes="$DATA_EPISODES"
fi
EVAL=$((STEPS / 4))  # evaluations at 1/4, 2/4, 3/4 and the end: the score is the mean of the last 3
"$PY" scripts/sweep.py --name=gpu_headline --envs=$ENV --seeds=0-$((SEEDS - 1)) --seeds_per_job="$SEEDS" \
  --method=gcbc --method=byol_gamma_a:alpha=1 --backend=local --workers=2 --save_dir="$OUT" \
  -- --dataset_dir="$DATA" --nodownload --train_steps="$STEPS" --steps_per_call=1000 --log_interval=$((STEPS / 10)) \
     --eval_interval=$EVAL --save_interval="$STEPS" --eval_episodes="$EPISODES" --wandb_mode=disabled
"$PY" scripts/results.py --runs="$OUT/gpu_headline" --format=markdown --ci --per_task
