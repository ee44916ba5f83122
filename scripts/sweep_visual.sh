#!/usr/bin/env bash
# Main table, visual datasets (paper Table "OGBench", 4 seeds): the `<method>_visual` presets
# (configs/presets.py: OGBench's impala_small CNN before the encoder, batch 256, 64-D encoder output;
# gamma 0.66 for the representation methods, BYOL-gamma variants with an EMA target, tau 0.99) for 500k
# steps, with the paper's visual alpha grid {1, 6, 10, 20} for BYOL-gamma^a and BYOL (add discount=0.66,0.99 to a
# method to sweep gamma). Put OGBench's visual files in main.py's --dataset_dir first; without them,
# `scripts/generate_dataset.py --env_name=<visual dataset>` renders visual-antmaze-* from antmaze state data
# and generates + renders visual-scene-play-v0 (datagen/visual.py, datagen/scene.py; hours on a CPU, about
# half an hour with EGL on a GPU). Generated data are this project's, not OGBench's (docs/reproduce.md).
# Scene runs use OGBench's random-crop augmentation (p_aug 0.5), the antmaze ones none (as OGBench).
#   scripts/sweep_visual.sh --dry_run
#   scripts/sweep_visual.sh --backend=slurm --partition=gpu --time_min=1440
# Arguments go to scripts/sweep.py (later ones win; `-- --flag=value` adds main.py flags).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
METHODS=(
  --method=byol_gamma_a_visual:alpha=1,6,10,20
  --method=byol_visual:alpha=1,6,10,20
  --method=tra_visual:alpha=10,40,60,100
  --method=tdsr_a_visual:alpha=0.01,0.05,0.001,0.005
  --method=gcbc_visual
)
"$PY" scripts/sweep.py --name=visual \
  --envs=visual-antmaze-medium-stitch-v0,visual-antmaze-large-stitch-v0 --seeds=0-3 \
  --main_flags='--train_steps=500000' "${METHODS[@]}" "$@"
exec "$PY" scripts/sweep.py --name=visual \
  --envs=visual-scene-play-v0 --seeds=0-3 \
  --main_flags='--train_steps=500000 --agent.p_aug=0.5' "${METHODS[@]}" "$@"
