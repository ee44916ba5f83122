#!/usr/bin/env bash
# The paper's headline row: GCBC against BYOL-gamma^a on antmaze-medium-stitch at the paper's budget (1M steps at
# batch 1024, an evaluation of 5 tasks x 50 episodes every 100k steps, a seed's score the mean of its last 3
# evaluations), then the table with 95% bootstrap intervals, per-task success and every seed's score.
#
#   bash scripts/headline.sh                           # 10 seeds, one GPU: each method's seeds vmapped in one process
#   bash scripts/headline.sh --seeds=0-3 --seeds_per_job=4
#   HEADLINE_GENERATE=1 bash scripts/headline.sh       # no OGBench files: generate this project's antmaze data first
#   bash scripts/headline.sh --backend=slurm --partition=gpu -- --time_limit=14000
#   bash scripts/headline.sh --dry_run                 # print the main.py commands only
#
# Arguments go to scripts/sweep.py (later ones win; after `--`, main.py flags for every run). Relaunching the same
# command skips finished runs and resumes the others (every run is started with --resume), so a run stopped by a
# time limit (main.py --time_limit exits 75), a preemption or Ctrl-C continues where its checkpoint left it.
# Environment (defaults in brackets): PYTHON [.venv/bin/python if present, else python3], HEADLINE_ENV
# [antmaze-medium-stitch-v0], HEADLINE_ALPHA [1; the paper's grid is 1, 6, 40, 100], HEADLINE_SEEDS [0-9],
# HEADLINE_DATASET_DIR [~/.ogbench/data], HEADLINE_GENERATE [0], HEADLINE_NAME [headline] (the run group),
# SAVE_DIR [runs].
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
ENV=${HEADLINE_ENV:-antmaze-medium-stitch-v0}
SEEDS=${HEADLINE_SEEDS:-0-9}
NAME=${HEADLINE_NAME:-headline}
SAVE_DIR=${SAVE_DIR:-runs}
# Every seed of a method in one process (vmapped): on one GPU that beats one process per seed.
SEED_COUNT=$("$PY" -c "from experiments.sweep import parse_seeds; print(len(parse_seeds('$SEEDS')))")
GENERATE=--nogenerate_dataset
if [ "${HEADLINE_GENERATE:-0}" = 1 ]; then GENERATE=--generate_dataset; fi
"$PY" scripts/sweep.py --name="$NAME" --save_dir="$SAVE_DIR" --envs="$ENV" --seeds="$SEEDS" --seeds_per_job="$SEED_COUNT" \
  --method=gcbc --method="byol_gamma_a:alpha=${HEADLINE_ALPHA:-1}" --backend=local \
  --main_flags="--dataset_dir=${HEADLINE_DATASET_DIR:-~/.ogbench/data} $GENERATE --wandb_mode=offline" "$@"
case " $* " in *" --dry_run "*) exit 0 ;; esac
"$PY" scripts/results.py --runs="$SAVE_DIR/$NAME" --format=markdown --ci --per_task --per_seed --baseline=gcbc
