"""CSV logs that survive kills and resumes, and a wandb run that never crashes training."""

import csv
import hashlib
import io
import logging
import os
import re
from typing import Dict, List, Tuple

from runtime.atomic_io import atomic_write_text, with_path
from utils.errors import ConfigError


def read_csv_rows(path: str) -> Tuple[List[str], List[Dict[str, str]], bool]:
    """(header, rows, whether an incomplete last line was dropped) of a CSV this project wrote.

    Every row is written whole, ending in a newline; a last line without one was cut off mid-write
    (a kill, a full disk) and may hold a cut number that still parses ("0.4" from "0.45"), so it is
    dropped, never read.
    """
    with open(path, newline='') as f:
        text = f.read()
    partial = bool(text) and not text.endswith('\n')
    if partial:
        text = text[: text.rfind('\n') + 1]
    reader = csv.DictReader(io.StringIO(text, newline=''))
    rows = list(reader)
    return list(reader.fieldnames or []), rows, partial


class CsvLogger:
    """Append-only CSV with a `step` column, flushed and fsynced after every row.

    On resume, `truncate_after(step)` drops rows written after the checkpoint, so the resumed run
    re-writes them and the file ends up with no duplicated and no missing rows.
    """

    def __init__(self, path: str):
        self.path = path
        self.fieldnames = None
        if os.path.exists(path):
            self.fieldnames = read_csv_rows(path)[0] or None

    def rows(self):
        """The complete rows (a row cut off by a kill is left out)."""
        if not os.path.exists(self.path):
            return []
        return read_csv_rows(self.path)[1]

    def _rewrite(self, rows, fieldnames):
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=fieldnames)
        writer.writeheader()
        writer.writerows(rows)
        atomic_write_text(self.path, buffer.getvalue())
        self.fieldnames = list(fieldnames)

    def truncate_after(self, step: int):
        if os.path.exists(self.path):
            # A row cut short by a kill is not among rows(): it goes with the rows after `step`.
            self._rewrite([r for r in self.rows() if int(r['step']) <= step], self.fieldnames or ['step'])

    def log(self, row: Dict[str, float], step: int):
        row = {'step': step, **{k: v for k, v in row.items() if k != 'step'}}
        if self.fieldnames is None:
            self._rewrite([], list(row))
        elif set(row) - set(self.fieldnames):
            # A metric appeared for the first time: widen the header, keeping every earlier row.
            self._rewrite(self.rows(), self.fieldnames + [k for k in row if k not in self.fieldnames])
        try:
            with open(self.path, 'a', newline='') as f:
                csv.DictWriter(f, fieldnames=self.fieldnames).writerow(row)
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            raise with_path(e, self.path) from e


def _wandb_run_id(group: str, name: str) -> str:
    """Stable across resumes, distinct across groups (the same setting in two sweeps stays two runs)."""
    digest = hashlib.sha1(f'{group}/{name}'.encode()).hexdigest()[:10]
    return f'{re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:50]}-{digest}'


def has_wandb_credentials() -> bool:
    if os.environ.get('WANDB_API_KEY'):
        return True
    netrc = os.path.expanduser('~/.netrc')
    return os.path.exists(netrc) and 'api.wandb.ai' in open(netrc).read()


# wandb's own switch (WANDB_MODE) and the modes it names, as main.py's --wandb_mode means them.
WANDB_ENV_MODES = {'online': 'online', 'run': 'online', 'offline': 'offline', 'dryrun': 'offline',
                   'disabled': 'disabled'}


def effective_wandb_mode(mode: str, flag_given: bool = True) -> str:
    """The mode a run logs in, said once: an explicit --wandb_mode wins; without it wandb's own WANDB_MODE decides,
    and without either the flag's default (online). Online without credentials falls back to offline."""
    source = '--wandb_mode'
    environment = os.environ.get('WANDB_MODE', '').strip()
    if not flag_given and environment:
        if environment.lower() not in WANDB_ENV_MODES:
            raise ConfigError(f'WANDB_MODE={environment} is not a wandb mode: set it to one of '
                              f'{", ".join(sorted(set(WANDB_ENV_MODES)))}, unset it, or pass --wandb_mode.')
        mode, source = WANDB_ENV_MODES[environment.lower()], f'WANDB_MODE={environment}'
    elif not flag_given:
        source = "--wandb_mode's default"
    if mode == 'online' and not has_wandb_credentials():
        logging.info(f'wandb: online ({source}), but no API key found (WANDB_API_KEY or `wandb login`): logging to '
                     f'wandb offline.')
        return 'offline'
    logging.info(f'wandb: {mode} ({source}).')
    return mode


class WandbLogger:
    """One wandb run (of one seed) in offline / online / disabled mode; any wandb failure (init or log) is
    reported once and logging continues to CSV only.

    Each seed of a process gets its own wandb run (`reinit='create_new'`): without it a second `wandb.init`
    in one process returns the first run, and every seed's rows would land in it. The run id is a function of
    the run directory (`_wandb_run_id`), so `--resume` continues the same wandb run.

    Every metric is plotted against the `step` it carries (wandb's own step counts log calls), so rows may
    arrive out of order: an evaluation run beside training is logged after training rows of later steps."""

    def __init__(self, mode: str, project: str, run_dir: str, name: str, id_group: str, group: str,
                 tags: List[str], config: dict, resume: bool):
        self.run = None
        if mode not in ('online', 'offline'):
            return
        # wandb offers its LLM-tracing add-on (Weave) whenever a module named `agents` is imported, as this
        # project's is; this run has no LLM calls to trace.
        os.environ.setdefault('WANDB_DISABLE_WEAVE', 'true')
        try:
            import wandb

            self.run = wandb.init(
                project=project, group=group, name=name, tags=tags, config=config, dir=run_dir, mode=mode,
                id=_wandb_run_id(id_group, name), resume='allow' if resume else None, reinit='create_new',
                settings=wandb.Settings(init_timeout=60, silent=True),
            )
            self.run.define_metric('step')
            self.run.define_metric('*', step_metric='step')
        except Exception as e:
            logging.warning(f'wandb init failed ({type(e).__name__}: {e}); continuing with CSV logs only.')
            self.run = None

    def last_step(self):
        """The last `step` this (resumed) wandb run holds, from its summary; None if unknown."""
        try:
            step = self.run.summary.get('step') if self.run is not None else None
            return int(step) if step is not None else None
        except Exception:  # a summary wandb could not fetch
            return None

    def log(self, metrics: Dict, step: int):
        if self.run is None:
            return
        try:
            self.run.log(dict(metrics, step=step))
        except Exception as e:
            logging.warning(f'wandb log failed ({type(e).__name__}: {e}); continuing with CSV logs only.')
            self.run = None

    def finish(self):
        if self.run is not None:
            try:
                self.run.finish()
            except Exception as e:
                logging.warning(f'wandb finish failed: {e}')
            self.run = None
