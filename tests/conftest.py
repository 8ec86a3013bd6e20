"""Core tests: make helper modules in tests/ (config_corpus, …) importable."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from fixtures_models import tiny_model_dir  # noqa: E402,F401  (session fixture for all tests)
from fixtures_packaging import fresh, wheels  # noqa: E402,F401  (session fixtures: wheels)
