"""CSV logs that survive kills and resumes, and a wandb run that never crashes training."""

import csv
import hashlib
import io
import logging
import os
import re
from typing import Dict

from utils.atomic_io import atomic_write_text


class CsvLogger:
    """Append-only CSV with a `step` column, flushed and fsynced after every row.

    On resume, `truncate_after(step)` drops rows written after the checkpoint, so the resumed run
    re-writes them and the file ends up with no duplicated and no missing rows.
    """

    def __init__(self, path: str):
        self.path = path
        self.fieldnames = None
        if os.path.exists(path):
            with open(path, newline='') as f:
                self.fieldnames = next(csv.reader(f), None)

    def rows(self):
        if not os.path.exists(self.path):
            return []
        with open(self.path, newline='') as f:
            return list(csv.DictReader(f))

    def _rewrite(self, rows, fieldnames):
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=fieldnames)
        writer.writeheader()
        writer.writerows(rows)
        atomic_write_text(self.path, buffer.getvalue())
        self.fieldnames = list(fieldnames)

    def truncate_after(self, step: int):
        if os.path.exists(self.path):
            # A row cut short by a kill has missing fields (None): drop it with the rows after `step`.
            complete = [r for r in self.rows() if None not in r.values() and None not in r]
            self._rewrite([r for r in complete if int(r['step']) <= step], self.fieldnames or ['step'])

    def log(self, row: Dict[str, float], step: int):
        row = {'step': step, **{k: v for k, v in row.items() if k != 'step'}}
        if self.fieldnames is None:
            self._rewrite([], list(row))
        elif set(row) - set(self.fieldnames):
            # A metric appeared for the first time: widen the header, keeping every earlier row.
            self._rewrite(self.rows(), self.fieldnames + [k for k in row if k not in self.fieldnames])
        with open(self.path, 'a', newline='') as f:
            csv.DictWriter(f, fieldnames=self.fieldnames).writerow(row)
            f.flush()
            os.fsync(f.fileno())


def _wandb_run_id(group: str, name: str) -> str:
    """Stable across resumes, distinct across groups (the same setting in two sweeps stays two runs)."""
    digest = hashlib.sha1(f'{group}/{name}'.encode()).hexdigest()[:10]
    return f'{re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:50]}-{digest}'


def _has_wandb_credentials() -> bool:
    if os.environ.get('WANDB_API_KEY'):
        return True
    netrc = os.path.expanduser('~/.netrc')
    return os.path.exists(netrc) and 'api.wandb.ai' in open(netrc).read()


class WandbLogger:
    """wandb in online / offline / disabled mode. Online without credentials falls back to offline;
    any wandb failure (init or log) is reported once and logging continues to CSV only."""

    def __init__(self, mode: str, project: str, group: str, name: str, config: dict, run_dir: str, resume: bool):
        self.run = None
        if mode not in ('online', 'offline', 'disabled'):
            raise ValueError(f'--wandb_mode must be online, offline or disabled, got {mode!r}.')
        if mode == 'online' and not _has_wandb_credentials():
            logging.info('No wandb API key found (WANDB_API_KEY or `wandb login`): logging to wandb offline.')
            mode = 'offline'
        if mode == 'disabled':
            return
        try:
            import wandb

            self.run = wandb.init(
                project=project, group=group, name=name, config=config, dir=run_dir, mode=mode,
                id=_wandb_run_id(group, name), resume='allow' if resume else None,
                settings=wandb.Settings(init_timeout=60, silent=True),
            )
        except Exception as e:
            logging.warning(f'wandb init failed ({type(e).__name__}: {e}); continuing with CSV logs only.')

    def log(self, metrics: Dict, step: int):
        if self.run is None:
            return
        try:
            self.run.log(metrics, step=step)
        except Exception as e:
            logging.warning(f'wandb log failed ({type(e).__name__}: {e}); continuing with CSV logs only.')
            self.run = None

    def finish(self):
        if self.run is not None:
            try:
                self.run.finish()
            except Exception as e:
                logging.warning(f'wandb finish failed: {e}')
