"""Offline generation of OGBench-format datasets (docs/method.md, section 2).

`can_generate(name)` / `write_dataset(name, dataset_dir, ...)` dispatch to the generator that
knows the dataset; a new generator (e.g. antmaze with a trained expert) registers here.
"""

from datagen import antmaze, pointmaze, scene
from datagen import visual  # after antmaze and scene: renders their datasets

_GENERATORS = {name: pointmaze for name in pointmaze.GENERATABLE_DATASETS}
_GENERATORS.update({name: antmaze for name in antmaze.GENERATABLE_DATASETS})
_GENERATORS.update({name: scene for name in scene.GENERATABLE_DATASETS})
_GENERATORS.update({name: visual for name in visual.GENERATABLE_DATASETS})
GENERATABLE_DATASETS = tuple(sorted(_GENERATORS))


def can_generate(dataset_name: str) -> bool:
    return dataset_name in _GENERATORS


def write_dataset(dataset_name: str, dataset_dir: str, **kwargs):
    """Generate `<name>.npz` and `<name>-val.npz` into `dataset_dir`; returns both paths."""
    if dataset_name not in _GENERATORS:
        raise ValueError(f'No offline generator for {dataset_name!r}. Generatable: {", ".join(GENERATABLE_DATASETS)}.')
    return _GENERATORS[dataset_name].write_dataset(dataset_name, dataset_dir, **kwargs)
