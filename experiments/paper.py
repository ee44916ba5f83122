"""The paper's main table (arXiv:2506.10137), to set this project's measurements beside: success in percent, the mean
over seeds (10 on state datasets, 4 on visual ones) after 1M gradient steps on OGBench's datasets, each cell at the
best α of its method's grid. docs/method.md, section 6, prints the same table (tests/unit/test_results.py checks that
the two agree). The paper ran no pointmaze dataset: those rows have no cell here."""

from typing import Optional

MAIN_TABLE_METHODS = ('byol_gamma_a', 'byol', 'tra', 'tdsr_a', 'gcbc')
MAIN_TABLE = {
    'antmaze-medium-stitch': (58, 59, 54, 64, 45),
    'antmaze-large-stitch': (19, 17, 11, 23, 3),
    'humanoidmaze-medium-stitch': (51, 23, 45, 42, 29),
    'humanoidmaze-large-stitch': (13, 3, 5, 11, 6),
    'antsoccer-arena-stitch': (25, 12, 14, 22, 24),
    'visual-antmaze-medium-stitch': (68, 57, 52, 49, 67),
    'visual-antmaze-large-stitch': (26, 26, 17, 29, 24),
    'visual-scene-play': (17, 13, 16, 14, 12),
}
MAIN_TABLE_SETTING = "1M steps, OGBench's data, best of 4 α"
# The main table's GCBC column is OGBench's published number, which the paper quotes ("we report OGBench GCBC
# results"), as it does its offline RL columns; its representation methods' columns are its own runs. A difference
# against GCBC there is two papers' runs, not one paired comparison.
QUOTED_FROM_OGBENCH = ('gcbc',)


def difference_source(method_label: str, baseline: str, baseline_label: str) -> str:
    """What the paper's main-table difference of `method_label` minus `baseline` is made of, in words."""
    own = f"its {method_label} ({MAIN_TABLE_SETTING})"
    if baseline in QUOTED_FROM_OGBENCH:
        return f'{own} minus the {baseline_label} number it quotes from OGBench'
    return f'{own} minus its {baseline_label}'


def main_table_difference(env: str, method: str, baseline: str) -> Optional[float]:
    """The paper's `method` minus `baseline` on `env` (a dataset name without its version), None where the main table
    has no such cell."""
    row = MAIN_TABLE.get(env)
    if row is None or method not in MAIN_TABLE_METHODS or baseline not in MAIN_TABLE_METHODS:
        return None
    cells = dict(zip(MAIN_TABLE_METHODS, row))
    return float(cells[method] - cells[baseline])
