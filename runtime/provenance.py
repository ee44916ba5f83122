"""Where a dataset file came from: a sidecar next to the file, and a record in each run directory.

A file this project writes gets a sidecar `<file>.provenance.json` (its source, generator, project
version, seed and episode counts, size and sha256). Nothing is added inside the `.npz`, so OGBench's
own loader reads our files and theirs alike. A file OGBench's download fetched for main.py gets a
sidecar saying so; a file without a sidecar (or whose sidecar no longer matches it) is external: an
OGBench download made elsewhere, or a file the user supplied.

Each run directory's `dataset.json` records, per split, the file's path, size, mtime, sha256 and
source, which `--resume` compares with the files it is about to train on and `scripts/results.py`
shows as a data-source line per table.
"""

import datetime
import hashlib
import logging
import os
from typing import Dict, List, Optional

from runtime.atomic_io import read_json, write_json
from utils.datasets import read_error

SIDECAR_SUFFIX = '.provenance.json'
PROJECT = 'byol-gamma'
# Files up to this size are hashed at every start (about 1 s per GB); bigger ones (rendered visual
# datasets, ~12 GB) are identified by size and mtime, and by the sha256 their generator recorded.
HASH_LIMIT_BYTES = 1 << 30
EXTERNAL_LABEL = 'external (OGBench download or user-supplied; no provenance record)'


def project_version() -> str:
    """This checkout's version from its pyproject.toml, else the installed package's, else 'unknown'."""
    pyproject = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'pyproject.toml')
    try:
        import tomllib

        with open(pyproject, 'rb') as f:
            return tomllib.load(f)['project']['version']
    except (OSError, KeyError, ValueError, ImportError):
        pass
    try:
        from importlib.metadata import version

        return version(PROJECT)
    except Exception:
        return 'unknown'


def sidecar_path(path: str) -> str:
    return path + SIDECAR_SUFFIX


def sha256_file(path: str, chunk_bytes: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, 'rb') as f:
        for block in iter(lambda: f.read(chunk_bytes), b''):
            digest.update(block)
    return digest.hexdigest()


def file_fingerprint(path: str, hash_limit: int = HASH_LIMIT_BYTES) -> Dict:
    """Path, size, mtime and (up to `hash_limit` bytes) sha256 of a file; DatasetError if it cannot be read."""
    try:
        stat = os.stat(path)
        return dict(path=os.path.abspath(path), size=stat.st_size, mtime=stat.st_mtime,
                    sha256=sha256_file(path) if stat.st_size <= hash_limit else None)
    except OSError as e:
        raise read_error(path, e) from None


def write_sidecar(path: str, record: Dict):
    """The provenance sidecar of the (complete) file at `path`: `record` plus what identifies the file."""
    write_json(sidecar_path(path), dict(
        record, file=os.path.basename(path), size=os.path.getsize(path), sha256=sha256_file(path),
        project=PROJECT, project_version=project_version(),
        created=datetime.datetime.now().astimezone().isoformat(timespec='seconds'),
    ))


def read_sidecar(path: str) -> Optional[Dict]:
    """The sidecar of `path`, or None if there is none (or it is unreadable)."""
    try:
        return read_json(sidecar_path(path))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        logging.warning(f'Unreadable provenance sidecar {sidecar_path(path)} ({e}): treating {path} as external.')
        return None


def file_source(path: str, fingerprint: Optional[Dict] = None) -> Dict:
    """The source record of a file: its sidecar if it describes this very file, else external."""
    sidecar = read_sidecar(path)
    if sidecar is None:
        return dict(source='external')
    fingerprint = fingerprint or file_fingerprint(path)
    same = sidecar.get('size') == fingerprint['size'] and (
        fingerprint['sha256'] is None or sidecar.get('sha256') in (None, fingerprint['sha256']))
    if not same:
        return dict(source='external', note=f'{os.path.basename(sidecar_path(path))} describes another file '
                                            f'(the file changed after it was written)')
    return sidecar


def source_label(source: Optional[Dict]) -> str:
    """One line for a results table: 'OGBench', 'generated (pointmaze scripted oracle, v0.3.0, seed 0,
    5000+500 episodes)', or external."""
    if not source:
        return 'unrecorded'
    kind = source.get('source')
    if kind == 'ogbench':
        return 'OGBench'
    if kind == 'generated':
        details = [source.get('description') or source.get('generator', '?'), f'v{source.get("project_version", "?")}']
        if source.get('seed') is not None:
            details.append(f'seed {source["seed"]}')
        if source.get('num_train_episodes') is not None:
            details.append(f'{source["num_train_episodes"]}+{source.get("num_val_episodes")} episodes')
        return f'generated ({", ".join(map(str, details))})'
    if source.get('note'):
        return f'external ({source["note"]})'
    return EXTERNAL_LABEL


def dataset_record(dataset_name: str, train_path: str, val_path: str) -> Dict:
    """What a run directory's dataset.json holds: both files' fingerprints and sources, and one label."""
    files = {}
    for split, path in (('train', train_path), ('val', val_path)):
        fingerprint = file_fingerprint(path)
        files[split] = dict(fingerprint, source=file_source(path, fingerprint))
    return dict(dataset=dataset_name, files=files, label=pair_label(files['train']['source'], files['val']['source']))


def pair_label(train_source: Optional[Dict], val_source: Optional[Dict]) -> str:
    train, val = source_label(train_source), source_label(val_source)
    return train if train == val else f'mixed: train {train}; val {val}'


def record_label(record: Optional[Dict]) -> str:
    """The label of a run's dataset.json (None: the run predates these records)."""
    if not record:
        return 'unrecorded'
    files = record.get('files', {})
    return pair_label(files.get('train', {}).get('source'), files.get('val', {}).get('source'))


def record_differences(recorded: Dict, current: Dict) -> List[str]:
    """How the files a run trained on differ from the files found now (sha256 when both have one, else size)."""
    differences = []
    for split in ('train', 'val'):
        old, new = recorded.get('files', {}).get(split), current['files'][split]
        if old is None:
            continue
        if old.get('sha256') and new.get('sha256'):
            changed = old['sha256'] != new['sha256']
            what = f'sha256 {old["sha256"][:12]}... -> {new["sha256"][:12]}...'
        else:
            changed = old.get('size') != new.get('size')
            what = f'size {old.get("size")} -> {new.get("size")} bytes'
        if changed:
            differences.append(f'{split} data ({old.get("path")} -> {new["path"]}): {what}')
    return differences
