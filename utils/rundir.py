"""A run directory: what `main.py` writes for one seed, and the one place that knows its layout.

    <save_dir>/<run_group>/<run_name>/
        flags.json          main.py's flags (seed included)
        config.json         the resolved agent config, plus the sampler it implies under "sampler"
        train.csv           training and validation metrics, one row per --log_interval
        eval.csv            evaluation metrics, one row per --eval_interval
        checkpoint.msgpack  agent (params, optimizer state, RNG) and step, rewritten atomically
        DONE                present once the run reached --train_steps

`main.py` writes it; the sweep launcher (`experiments/sweep.py`) asks whether it is done; the
results tables (`experiments/results.py`) and the analyses (`experiments/analysis.py`)
read it. With `--num_seeds N` every seed gets its own directory of this same layout.
"""

import csv
import dataclasses
import os
from typing import Dict, List

from utils.atomic_io import read_json, write_json
from utils.checkpoints import CHECKPOINT_NAME

FLAGS_FILE = 'flags.json'
CONFIG_FILE = 'config.json'
TRAIN_LOG = 'train.csv'
EVAL_LOG = 'eval.csv'
DONE_FILE = 'DONE'


def default_run_name(agent_name: str, env_name: str, seed: int) -> str:
    return f'{agent_name}_{env_name}_sd{seed}'


@dataclasses.dataclass(frozen=True)
class RunDir:
    path: str

    @classmethod
    def at(cls, save_dir: str, run_group: str, run_name: str) -> 'RunDir':
        return cls(os.path.join(os.path.expanduser(save_dir), run_group, run_name))

    @property
    def name(self) -> str:
        return os.path.basename(os.path.normpath(self.path))

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    @property
    def checkpoint_path(self) -> str:
        return self.file(CHECKPOINT_NAME)

    @property
    def train_log_path(self) -> str:
        return self.file(TRAIN_LOG)

    @property
    def eval_log_path(self) -> str:
        return self.file(EVAL_LOG)

    def has_checkpoint(self) -> bool:
        return os.path.exists(self.checkpoint_path)

    def is_done(self) -> bool:
        return os.path.exists(self.file(DONE_FILE))

    def missing(self, names=(FLAGS_FILE, CONFIG_FILE, CHECKPOINT_NAME)) -> List[str]:
        """Which of `names` this directory lacks (all of them if it does not exist)."""
        return [name for name in names if not os.path.exists(self.file(name))]

    def read_flags(self) -> Dict:
        return read_json(self.file(FLAGS_FILE))

    def read_config(self) -> Dict:
        """The saved config.json: the agent config, with the sampler under 'sampler'."""
        return read_json(self.file(CONFIG_FILE))

    def eval_rows(self) -> List[Dict[str, str]]:
        if not os.path.exists(self.eval_log_path):
            return []
        with open(self.eval_log_path, newline='') as f:
            return list(csv.DictReader(f))

    def write_metadata(self, flags: Dict, config: Dict):
        os.makedirs(self.path, exist_ok=True)
        write_json(self.file(FLAGS_FILE), flags)
        write_json(self.file(CONFIG_FILE), config)

    def mark_done(self):
        write_json(self.file(DONE_FILE), {})
