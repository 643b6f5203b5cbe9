"""The editable install registered ``graph`` as a namespace package (it was installed
before graph/__init__.py existed); put the repository first so ``import graph`` runs
graph/__init__.py under pytest too."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
