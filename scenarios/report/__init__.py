"""report.html: the plots a person reads first (`shufflesim report RUN_DIR`).

`data` loads a run folder, `figures` makes the plotly figures, `page` assembles one
self-contained HTML file, `build` puts a run's report together.
"""

from scenarios.report.build import REPORT_FILE, build_report, write_report
from scenarios.report.data import RunFolderError, load_run

__all__ = ["REPORT_FILE", "RunFolderError", "build_report", "load_run", "write_report"]
