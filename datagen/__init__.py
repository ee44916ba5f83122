"""Offline generation of OGBench-format datasets (docs/method.md, section 2).

`can_generate(name)` / `write_dataset(name, dataset_dir, ...)` dispatch to the generator that
knows the dataset; a new generator (e.g. antmaze with a trained expert) registers here. Each
generator module declares `DESCRIPTION` (what produces the data), `FAITHFUL` (whether the data come
from the procedure OGBench collected its own with, so that main.py may generate them when the
download fails; only pointmaze) and `estimated_bytes(...)`; each writes a provenance sidecar next to
every file (runtime/provenance.py) and never replaces an existing file.
"""

from utils.render_backend import check_before_import

check_before_import()  # before anything imports mujoco (utils/render_backend.py)

import contextlib
import logging

from datagen import (
    antmaze,
    pointmaze,
    scene,
    visual,  # after antmaze and scene: renders their datasets
)
from runtime.dataset_files import check_writable_space, dataset_lock

_GENERATORS = {name: pointmaze for name in pointmaze.GENERATABLE_DATASETS}
_GENERATORS.update({name: antmaze for name in antmaze.GENERATABLE_DATASETS})
_GENERATORS.update({name: scene for name in scene.GENERATABLE_DATASETS})
_GENERATORS.update({name: visual for name in visual.GENERATABLE_DATASETS})
GENERATABLE_DATASETS = tuple(sorted(_GENERATORS))


def can_generate(dataset_name: str) -> bool:
    return dataset_name in _GENERATORS


def _generator(dataset_name: str):
    if dataset_name not in _GENERATORS:
        raise ValueError(f'No offline generator for {dataset_name!r}. Generatable: {", ".join(GENERATABLE_DATASETS)}.')
    return _GENERATORS[dataset_name]


def is_faithful(dataset_name: str) -> bool:
    """Whether the generator follows the very procedure OGBench collected this dataset with."""
    return _generator(dataset_name).FAITHFUL


def describe(dataset_name: str) -> str:
    return _generator(dataset_name).DESCRIPTION


def estimated_bytes(dataset_name: str, **kwargs) -> int:
    return _generator(dataset_name).estimated_bytes(dataset_name, **kwargs)


def write_dataset(dataset_name: str, dataset_dir: str, log=None, **kwargs):
    """Generate `<name>.npz` and `<name>-val.npz` into `dataset_dir`; returns both paths. The folder's writability
    and its free space are checked first; an existing file is never replaced. Runs under the dataset's lock (and,
    for a visual dataset, its state dataset's): a second process generating the same files waits for the first
    (`log`, default logging.info, says for whom) and then finds them written."""
    generator = _generator(dataset_name)
    sizes = {k: v for k, v in kwargs.items() if k in ('num_train_episodes', 'num_val_episodes', 'episode_length')}
    check_writable_space(dataset_dir, generator.estimated_bytes(dataset_name, **sizes), f'{dataset_name} files')
    names = [dataset_name] + ([visual.state_dataset_name(dataset_name)] if generator is visual else [])
    log = log or logging.info
    with contextlib.ExitStack() as locks:
        for name in names:  # always the visual dataset before its state dataset: no two processes lock crosswise
            locks.enter_context(dataset_lock(name, dataset_dir, log))
        return generator.write_dataset(dataset_name, dataset_dir, **kwargs)
