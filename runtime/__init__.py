"""The run machinery of main.py and the scripts: the checked request, run directories and their locks, writers and
checkpoints, dataset files and their provenance, stop requests and exit statuses. No learning code lives here."""

from utils.render_backend import check_before_import

check_before_import()  # before anything imports mujoco (utils/render_backend.py)
