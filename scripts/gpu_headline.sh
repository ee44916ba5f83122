#!/usr/bin/env bash
# The paper's headline row, GCBC vs BYOL-gamma^a on antmaze-medium-stitch at the paper's budget (1M steps,
# batch 1024, 10 seeds, 5 tasks x 50 episodes every 100k steps, score = mean of the last 3), in chunks that
# each fit one short GPU call. Run the same command call after call, carrying the state between them, until
# it prints the final table (experiments/headline.py says what one call does):
#
#   bash scripts/gpu_headline.sh [--alpha=1|6|40|100] [-- main.py flags for every run]
#
# Each call generates the dataset when it is missing (OGBench's 5000 + 500 episodes with the project's
# ant expert, on all cores; the same bytes on every machine), trains the first unfinished group of seeds
# (both methods at once, each method's seeds vmapped) until the chunk's deadline, prints progress and an
# ETA, and packs the state for the next call. Environment (default):
#   PYTHON                  interpreter (.venv/bin/python if there, else python3)
#   ENV                     dataset (antmaze-medium-stitch-v0)
#   DATASET_DIR             where the dataset is read or generated (data/headline)
#   DATA_EPISODES           train episodes to generate (OGBench's: 5000)
#   SAVE_DIR                run directories go to $SAVE_DIR/gpu_headline (runs)
#   HEADLINE_ALPHA          BYOL-gamma^a's alpha (1); --alpha=... wins
#   HEADLINE_SEEDS          seeds (0-9)
#   HEADLINE_GROUP_SEEDS    seeds per method trained at once (2): the state a group leaves is about
#                           14.4 MB per seed (both methods' checkpoints); docs/reproduce.md says what fits a call
#   HEADLINE_STEPS / HEADLINE_EVAL_INTERVAL / HEADLINE_EVAL_EPISODES   (1000000 / 100000 / 50)
#   HEADLINE_CHUNK_SECONDS  SIGTERM to training this long after this script started (420)
#   HEADLINE_KILL_SECONDS   SIGKILL to training still running (540); keep it inside the call's limit, and
#                           leave after the SIGTERM the time of an evaluation main.py may be finishing
#                           (about 20 s per seed and method on 16 cores; measured on an H200 machine)
#   HEADLINE_CHUNK_STEPS    also stop once every run gained this many steps (0: time budget only)
#   HEADLINE_STATE_IN       folder holding the previous call's packed state (none)
#   HEADLINE_STATE_OUT      folder to pack this call's state into, e.g. $OUT (none)
set -euo pipefail
STARTED=$(date +%s)
cd "$(dirname "$0")/.."
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON; elif [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
ENV=${ENV:-antmaze-medium-stitch-v0}
DATA=${DATASET_DIR:-data/headline}
if [ ! -f "$DATA/$ENV.npz" ] || [ ! -f "$DATA/$ENV-val.npz" ]; then
  "$PY" scripts/generate_dataset.py --env_name="$ENV" --dataset_dir="$DATA" ${DATA_EPISODES:+--num_episodes=$DATA_EPISODES}
  echo "dataset ready after $(( $(date +%s) - STARTED )) s"
fi
exec "$PY" -m experiments.headline --started_at="$STARTED" --env="$ENV" --dataset_dir="$DATA" --save_dir="${SAVE_DIR:-runs}" \
  --alpha="${HEADLINE_ALPHA:-1}" --seeds="${HEADLINE_SEEDS:-0-9}" --group_seeds="${HEADLINE_GROUP_SEEDS:-2}" \
  --train_steps="${HEADLINE_STEPS:-1000000}" --eval_interval="${HEADLINE_EVAL_INTERVAL:-100000}" \
  --eval_episodes="${HEADLINE_EVAL_EPISODES:-50}" --chunk_seconds="${HEADLINE_CHUNK_SECONDS:-420}" \
  --kill_seconds="${HEADLINE_KILL_SECONDS:-540}" --chunk_steps="${HEADLINE_CHUNK_STEPS:-0}" \
  --state_in="${HEADLINE_STATE_IN:-}" --state_out="${HEADLINE_STATE_OUT:-}" "$@"
