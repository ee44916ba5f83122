"""The metrics main.py logs (eval.csv's columns) from an evaluation's per-episode records, against a direct
computation in exact arithmetic from hand-made records."""

import random
from fractions import Fraction

import numpy as np
import pytest

from utils.evaluation import Episode, evaluation_metrics

# One seed's evaluation, task by task: (success, return, length) per episode. The tasks have different numbers of
# episodes, so the mean over tasks of their success (17/36) differs from the mean over all episodes (20/36); a task
# given as a task_info dict is recorded as 'info{k}'; one episode stayed at the goal after reaching it (return 3).
TABLE = {
    2: [(1, 1, 12), (0, 0, 100), (1, 1, 40), (1, 3, 7)],
    'info1': [(0, 0, 100), (0, 0, 100)],
    5: [(1, 1, 5), (1, 1, 9), (0, 0, 100)],
}


def records(table, seed=7):
    return [Episode(seed=seed, task=task, episode=j, success=float(success), return_=float(ret), length=length,
                    final_observation=np.zeros(2), video=None)
            for task, rows in table.items() for j, (success, ret, length) in enumerate(rows)]


def direct_metrics(tables):
    """The metrics of one evaluation's episodes (the episodes of every table in `tables` pooled), as exact fractions:
    a task's success is the fraction of its episodes that succeeded, overall success the mean of those over tasks,
    return and length the means over all episodes."""
    rows = {}
    for table in tables:
        for task, task_rows in table.items():
            rows.setdefault(task, []).extend(task_rows)
    expected = {f'evaluation/task{task}_success': Fraction(sum(r[0] for r in task_rows), len(task_rows))
                for task, task_rows in rows.items()}
    expected['evaluation/overall_success'] = sum(expected.values()) / len(rows)
    everything = [r for task_rows in rows.values() for r in task_rows]
    expected['evaluation/overall_return'] = Fraction(sum(r[1] for r in everything), len(everything))
    expected['evaluation/overall_length'] = Fraction(sum(r[2] for r in everything), len(everything))
    return expected


def assert_metrics_equal(metrics, expected):
    assert set(metrics) == set(expected)
    for key, value in expected.items():
        assert type(metrics[key]) is float, key  # what eval.csv and wandb receive
        # The code's float64 means of per-episode values (and of per-task means): a sum of at most 3 rounded terms and a
        # division round within 4 u = 9e-16 of the exact fraction's value (u = 2^-53).
        assert metrics[key] == pytest.approx(float(value), rel=1e-15, abs=0), key


def test_metrics_of_one_seeds_episodes():
    metrics = evaluation_metrics(records(TABLE))
    expected = direct_metrics([TABLE])
    assert expected['evaluation/overall_success'] == Fraction(17, 36)  # the hand computation, once
    assert_metrics_equal(metrics, expected)
    # eval.csv's columns: the tasks in the order the evaluation ran them, then the overall metrics.
    assert list(metrics) == ['evaluation/task2_success', 'evaluation/taskinfo1_success', 'evaluation/task5_success',
                             'evaluation/overall_success', 'evaluation/overall_return', 'evaluation/overall_length']


def test_metrics_do_not_depend_on_the_records_order():
    shuffled = records(TABLE)
    random.Random(0).shuffle(shuffled)
    assert_metrics_equal(evaluation_metrics(shuffled), direct_metrics([TABLE]))


def test_records_of_several_seeds_are_pooled_per_task():
    other = {2: [(0, 0, 100)] * 4, 'info1': [(1, 1, 30), (0, 0, 100)], 5: [(1, 1, 50)] * 3}
    metrics = evaluation_metrics(records(TABLE, seed=7) + records(other, seed=8))
    assert_metrics_equal(metrics, direct_metrics([TABLE, other]))


def test_no_records_is_an_error():
    with pytest.raises(ValueError, match='at least one episode'):
        evaluation_metrics([])
