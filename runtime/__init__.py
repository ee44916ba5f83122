"""The run machinery of main.py and the scripts: the checked request and the memory it needs, run directories and their
locks, writers and checkpoints, dataset files and their provenance, when evaluations run, stop requests, named errors
and exit statuses. No learning code lives here."""

from utils.render_backend import check_before_import

check_before_import()  # before anything imports mujoco (utils/render_backend.py)
