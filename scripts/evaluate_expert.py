"""Re-measure the committed ant expert's success at following BFS subgoal directions through
antmaze-medium's 5 evaluation tasks, and print it (the weights are only read).

    python scripts/evaluate_expert.py [--episodes_per_task=20] [--seed=0] [--record]

The result: episode count, per-task and overall success, 95% Wilson intervals of both and the command
that produced it. `--record` writes it into the expert's tracked record, datagen/experts/ant_xy_expert.json
(`evaluation.antmaze_medium_subgoal_following`), which should only change with the expert itself.
"""

import math
import shlex
import sys
import time

from absl import app, flags

from datagen.antmaze import EXPERT_RECORD, evaluate_subgoal_following, load_expert
from runtime.atomic_io import read_json, write_json
from runtime.exits import parse_absl_flags

FLAGS = flags.FLAGS
flags.DEFINE_integer('episodes_per_task', 20, 'Episodes for each of the 5 evaluation tasks.')
flags.DEFINE_integer('seed', 0, 'Seed of the first episode (episode k is reset with seed + k).')
flags.DEFINE_bool('record', False, f'Write the result into the tracked record {EXPERT_RECORD}.')


def wilson_interval(successes, n, z=1.959964):
    """The 95% Wilson score interval of a binomial proportion."""
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def main(_):
    started = time.monotonic()
    result = evaluate_subgoal_following(load_expert(), maze_type='medium', episodes_per_task=FLAGS.episodes_per_task,
                                        seed=FLAGS.seed)
    successes = round(result['success'] * result['episodes'])
    low, high = wilson_interval(successes, result['episodes'])
    result.update(
        episodes_per_task=FLAGS.episodes_per_task,
        seed=FLAGS.seed,
        successes=successes,
        success_ci95_wilson=[round(low, 4), round(high, 4)],
        per_task_success_ci95_wilson=[
            [round(bound, 4) for bound in wilson_interval(round(rate * FLAGS.episodes_per_task), FLAGS.episodes_per_task)]
            for rate in result['per_task_success']
        ],
        wall_clock_s=round(time.monotonic() - started, 1),
        command='python ' + shlex.join(sys.argv),
    )
    print(result)
    if FLAGS.record:
        record = read_json(EXPERT_RECORD)
        record['evaluation']['antmaze_medium_subgoal_following'] = dict(sorted(result.items()))
        write_json(EXPERT_RECORD, record)
        print(f'Recorded in {EXPERT_RECORD}')


if __name__ == '__main__':
    app.run(main, flags_parser=parse_absl_flags)
