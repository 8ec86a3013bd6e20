"""rft-plugin-verl's tests: this folder importable (``test_verl_lora`` reuses the helpers of
``test_verl_trainer``), as ``tests/conftest.py`` does for the core's tests."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
