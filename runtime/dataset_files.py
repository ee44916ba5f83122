"""Where a run's dataset files come from: found, downloaded with OGBench's own download, or generated (by the
generator the caller passes, `datagen`), one process at a time per dataset, never replacing a file. Where a file came
from is recorded beside it (runtime/provenance.py); what a dataset file is, and how it is read, is utils/datasets.py's.
"""

import contextlib
import importlib
import logging
import os
import re
import shutil
import socket
import tempfile
import time
from typing import List, Tuple

import filelock

from runtime.lock_owner import NO_LOCKING, holder, write_record
from utils.datasets import env_id_for
from utils.errors import DatasetError


def dataset_paths(dataset_name: str, dataset_dir: str) -> Tuple[str, str]:
    base = os.path.join(os.path.expanduser(dataset_dir), dataset_name)
    return f'{base}.npz', f'{base}-val.npz'


def check_writable_space(directory: str, needed_bytes: int, what: str):
    """DatasetError before any work if `directory` cannot be created and written, or has less than
    `needed_bytes` free (`what` names the files, for the message)."""
    directory = os.path.expanduser(directory)
    try:
        os.makedirs(directory, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=directory, prefix='.write-test-')
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise DatasetError(
            f'Cannot write {what} into {directory} ({e.strerror}: {e.filename or directory}); nothing was generated. '
            f'Pass a writable --dataset_dir.'
        ) from None
    free = shutil.disk_usage(directory).free
    if free < needed_bytes:
        raise DatasetError(
            f'{what} need about {needed_bytes / 1e9:.2f} GB in {directory}, but only {free / 1e9:.2f} GB are free; '
            f'nothing was generated. Free space or pass another --dataset_dir.'
        )


# ----------------------------------------------------------------------------------------------
# One writer of a dataset at a time.

LOCK_SUFFIX = '.lock'


def dataset_lock_path(dataset_name: str, dataset_dir: str) -> str:
    return os.path.join(os.path.expanduser(dataset_dir), dataset_name + LOCK_SUFFIX)


@contextlib.contextmanager
def dataset_lock(dataset_name: str, dataset_dir: str, log=logging.info, blocking: bool = True):
    """Exclusive right to write `<dataset_name>` files into `dataset_dir`, across processes (and threads).

    filelock's FileLock on `<dataset_dir>/<dataset_name>.lock`, which records its holder (pid, host, start time and
    command; runtime/lock_owner.py): a second process logs whom it waits for and waits until the first is done
    (however it ends: the kernel drops the lock of a killed process). Re-entrant within a thread. On entry, with the
    lock held, stale temporary files of this dataset (left by a process killed mid-write: nobody else can be writing
    them now) are removed. The lock file is removed on release. Yields how many seconds this process waited (0.0 if
    it did not), or None when `blocking` is False and another process holds the lock. The folder's writability is
    checked first (DatasetError naming it)."""
    path = dataset_lock_path(dataset_name, dataset_dir)
    check_writable_space(os.path.dirname(path), 0, f'{dataset_name} files')
    lock = filelock.FileLock(path, is_singleton=True, on_acquired=write_record)  # one per path: re-entrant
    waited = None
    try:
        lock.acquire(blocking=False)
    except filelock.Timeout:
        if blocking:
            log(f'{dataset_name}: another process is generating or downloading it into {os.path.dirname(path)} '
                f'({holder(path)}); waiting for it to finish (lock file {path}), then this process uses its files.')
            started = time.monotonic()
            lock.acquire()
            waited = time.monotonic() - started
    except OSError as e:
        if e.errno not in NO_LOCKING:
            raise DatasetError(f'Cannot lock {path} ({e.strerror}) to obtain {dataset_name}; nothing was generated. '
                               f'Pass another --dataset_dir.') from None
        logging.warning(f'{os.path.dirname(path)}: this file system does not support flock ({e.strerror}); two '
                        f'processes obtaining {dataset_name} at once are NOT kept apart.')
    if not lock.is_locked:  # another process holds it (and not `blocking`), or this file system cannot lock
        yield 0.0 if blocking else None
        return
    outermost = lock.lock_counter == 1
    try:
        if outermost:
            if waited is not None:
                missing = [os.path.basename(p) for p in dataset_paths(dataset_name, dataset_dir) if not os.path.exists(p)]
                if missing:
                    log(f'{dataset_name}: the other process ended after {waited:.0f} s without writing '
                        f'{" and ".join(missing)} (it was stopped, killed or failed); obtaining them here.')
                else:
                    log(f'{dataset_name}: the other process finished after {waited:.0f} s.')
            remove_stale_temporaries(dataset_name, dataset_dir, log)
        yield waited or 0.0
    finally:
        if outermost:
            with contextlib.suppress(OSError):
                os.unlink(path)  # while still holding it: a waiter then locks a new file (filelock checks)
        lock.release()


def stale_temporaries(dataset_name: str, dataset_dir: str) -> List[str]:
    """Temporary files of this dataset's writers found in `dataset_dir`: runtime/atomic_io's `<file>.<random>.tmp`
    of both files and their provenance sidecars, and OGBench's download's `<file>.tmp`. Stale only if nobody
    holds the dataset's lock."""
    from runtime.atomic_io import temp_name_pattern
    from runtime.provenance import SIDECAR_SUFFIX

    directory = os.path.expanduser(dataset_dir)
    files = [f'{dataset_name}.npz', f'{dataset_name}-val.npz']
    patterns = [temp_name_pattern(name) for name in files + [f + SIDECAR_SUFFIX for f in files]]
    patterns += [re.compile(re.escape(name + '.tmp')) for name in files]
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return sorted(os.path.join(directory, name) for name in names if any(p.fullmatch(name) for p in patterns))


def remove_stale_temporaries(dataset_name: str, dataset_dir: str, log=logging.info) -> List[str]:
    """Remove `stale_temporaries`; call only while holding `dataset_lock` (then nobody can be writing them)."""
    removed = []
    for path in stale_temporaries(dataset_name, dataset_dir):
        try:
            size = os.lstat(path).st_size
            os.unlink(path)
        except FileNotFoundError:
            continue
        except OSError as e:
            logging.warning(f'Could not remove the stale temporary file {path} ({e.strerror}); remove it by hand.')
            continue
        removed.append(f'{os.path.basename(path)} ({size} bytes)')
    if removed:
        log(f'{dataset_name}: removed {len(removed)} stale temporary file(s) left in {os.path.expanduser(dataset_dir)} by a '
            f'process killed while writing: {", ".join(removed)}.')
    return removed


def _settle_present_files(dataset_name: str, dataset_dir: str, paths, log):
    """Both files are there: if their writer may still be finishing (its lock is held and a provenance
    sidecar is not written yet), wait for it; clean stale temporaries when nobody holds the lock. Never
    fails for want of a writable folder (a read-only copy of the data is fine)."""
    from runtime.provenance import sidecar_path

    lock_path = dataset_lock_path(dataset_name, dataset_dir)
    finishing = os.path.exists(lock_path) and not all(os.path.exists(sidecar_path(p)) for p in paths)
    if not finishing and not stale_temporaries(dataset_name, dataset_dir):
        return
    try:
        with dataset_lock(dataset_name, dataset_dir, log, blocking=finishing):
            pass
    except DatasetError:
        pass  # cannot write there: nothing to clean, and nobody can be writing


def _try_download(dataset_name: str, dataset_dir: str) -> str:
    """OGBench's own download; returns '' on success, else why it failed (never raises)."""
    import ogbench

    previous_timeout = socket.getdefaulttimeout()
    socket.setdefaulttimeout(30)
    try:
        ogbench.download_datasets([dataset_name], dataset_dir=dataset_dir)
        return ''
    except Exception as e:  # any network/server failure means: fall back to generation
        for path in dataset_paths(dataset_name, dataset_dir):
            if os.path.exists(path + '.tmp'):
                os.remove(path + '.tmp')
        return f'{type(e).__name__}: {e}'
    finally:
        socket.setdefaulttimeout(previous_timeout)


def ensure_dataset(dataset_name: str, dataset_dir: str, download: bool = True, generator=None,
                   generate: bool = False, log=logging.info) -> Tuple[str, str]:
    """Paths of the train and validation files, obtaining them if needed; never replaces a file.

    `generator` is an object with `can_generate(name)`, `is_faithful(name)`, `describe(name)` and
    `write_dataset(name, dataset_dir, **kwargs)` (the `datagen` package; the caller chooses, so this
    core module never imports the generators), or the name of such a module, imported only when a file
    must be made: the generators import every simulator they drive, which a run whose files exist does
    not need. Whatever may write runs under `dataset_lock`: a process finding another one obtaining the same dataset
    logs whom it waits for, waits, and then uses the files that process wrote. Order:

    1. both files exist (downloaded from OGBench, generated earlier, or supplied): use them;
    2. one exists, the other not: if the present one's provenance sidecar says this project generated
       it, the generator regenerates the pair from the recorded seed and counts, checks that the
       present file is exactly what it produces, and writes only the missing one; otherwise a
       DatasetError says how to proceed (files of unknown origin are never paired with new ones);
    3. `generate` (the user asked, e.g. main.py --generate_dataset): generate both;
    4. OGBench's download (unless `download` is False);
    5. if the download failed and the project generates this dataset faithfully to OGBench's own
       collection (pointmaze: OGBench's data come from the same scripted oracle), generate it;
    6. otherwise a DatasetError saying how to get the files, or how to generate them and that the
       generated data are not OGBench's.
    """
    env_id_for(dataset_name)
    train_path, val_path = dataset_paths(dataset_name, dataset_dir)
    if all(os.path.exists(path) for path in (train_path, val_path)):
        _settle_present_files(dataset_name, dataset_dir, (train_path, val_path), log)
        return train_path, val_path
    # Everything below may write: one process at a time per dataset. A process that finds another one
    # obtaining the same dataset waits for it, then uses its files.
    with dataset_lock(dataset_name, dataset_dir, log) as waited:
        if all(os.path.exists(path) for path in (train_path, val_path)):
            if waited:
                log(f'{dataset_name}: using the files the other process wrote: {train_path} and {os.path.basename(val_path)}.')
            return train_path, val_path
        return _obtain(dataset_name, dataset_dir, download, generator, generate, log)


def _obtain(dataset_name, dataset_dir, download, generator, generate, log):
    """Steps 2-6 of ensure_dataset (called with the dataset's lock held)."""
    if isinstance(generator, str):
        generator = importlib.import_module(generator)
    train_path, val_path = dataset_paths(dataset_name, dataset_dir)
    present = [path for path in (train_path, val_path) if os.path.exists(path)]
    if len(present) == 1:
        return _complete_pair(dataset_name, dataset_dir, present[0], val_path if present[0] == train_path else train_path,
                              generator, log)
    can_generate = generator is not None and generator.can_generate(dataset_name)
    if generate:
        if not can_generate:
            raise DatasetError(f'--generate_dataset: this project has no generator for {dataset_name} '
                               f'(it generates: {", ".join(generator.GENERATABLE_DATASETS) if generator else "none"}).')
        log(f'Generating {dataset_name} into {os.path.dirname(train_path)} as asked, with {generator.describe(dataset_name)}'
            + ('' if generator.is_faithful(dataset_name) else ' -- these are NOT OGBench\'s data') + '.')
        generator.write_dataset(dataset_name, dataset_dir)
        return train_path, val_path
    failure = 'skipped: --nodownload'
    if download:
        log(f'{train_path} not found: trying OGBench download.')
        os.makedirs(os.path.expanduser(dataset_dir), exist_ok=True)
        failure = _try_download(dataset_name, dataset_dir)
        if not failure and all(os.path.exists(p) for p in (train_path, val_path)):
            from runtime.provenance import write_sidecar

            for split, path in (('train', train_path), ('val', val_path)):
                write_sidecar(path, dict(source='ogbench', dataset=dataset_name, split=split,
                                         note="fetched by ogbench.download_datasets"))
            return train_path, val_path
        failure = failure or 'the download did not produce both files'
    if can_generate and generator.is_faithful(dataset_name):
        log(f'OGBench download unavailable ({failure}); generating {dataset_name} offline into '
            f'{os.path.dirname(train_path)} with {generator.describe(dataset_name)}, the procedure OGBench collected '
            f'it with (about 1-3 min). This is done once.')
        generator.write_dataset(dataset_name, dataset_dir)
        return train_path, val_path
    if can_generate:
        raise DatasetError(
            f'Dataset file {train_path} (and {os.path.basename(val_path)}) not found and the OGBench download failed '
            f'({failure}). This project can generate {dataset_name} with {generator.describe(dataset_name)}, but those '
            f'are NOT OGBench\'s data, so it does so only when asked: python scripts/generate_dataset.py '
            f'--env_name={dataset_name} --dataset_dir={dataset_dir} (or pass --generate_dataset to main.py). For OGBench\'s '
            f'own files, download them on a machine with internet (python -c "import ogbench; '
            f'ogbench.download_datasets([\'{dataset_name}\'])") and copy them into {os.path.dirname(train_path)}.'
        )
    raise DatasetError(
        f'Dataset file {train_path} (and {os.path.basename(val_path)}) not found, the OGBench download failed '
        f'({failure}), and this project cannot generate {dataset_name} offline. Download both files from '
        f'OGBench on a machine with internet (python -c "import ogbench; ogbench.download_datasets([\'{dataset_name}\'])") '
        f'and copy them into {os.path.dirname(train_path)}, or pass --dataset_dir pointing at them.'
    )


def _complete_pair(dataset_name, dataset_dir, present, missing, generator, log):
    """One file of the pair is there: regenerate the missing one from the present one's recorded
    provenance when this project wrote it, else stop (see ensure_dataset)."""
    from runtime.provenance import file_source

    train_path, val_path = dataset_paths(dataset_name, dataset_dir)
    source = file_source(present)
    recorded = source.get('source') == 'generated'
    if recorded and generator is not None and generator.can_generate(dataset_name):
        log(f'{missing} is missing: regenerating it from {os.path.basename(present)}\'s recorded provenance '
            f'({source.get("generator")}, seed {source.get("seed")}, {source.get("num_train_episodes")}+'
            f'{source.get("num_val_episodes")} episodes); {present} is checked against the regenerated data, never replaced.')
        kwargs = {key: source[key] for key in ('seed', 'num_train_episodes', 'num_val_episodes', 'episode_length') if key in source}
        generator.write_dataset(dataset_name, dataset_dir, **kwargs)
        return train_path, val_path
    origin = ('this project generated it, but with no generator for it here' if recorded
              else 'it has no provenance record from this project (an OGBench download or a user-supplied file)')
    raise DatasetError(
        f'{present} exists but {missing} is missing, and the missing file cannot be made to match it: {origin}. '
        f'Nothing was written or replaced. Copy the missing file from where {os.path.basename(present)} came from, or '
        f'download both from OGBench into an empty folder (python -c "import ogbench; ogbench.download_datasets('
        f'[\'{dataset_name}\'], dataset_dir=\'<folder>\')") and pass --dataset_dir=<folder>, or move '
        f'{os.path.basename(present)} out of {os.path.dirname(present)} to obtain both files afresh.'
    )
