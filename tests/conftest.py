import sys
from pathlib import Path

# tests/ helpers importable as `helpers` without making tests a package
sys.path.insert(0, str(Path(__file__).parent))
