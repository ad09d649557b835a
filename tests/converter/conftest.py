import sys
from pathlib import Path

# models.py (the torch-free ResNet-18 / MobileNetV2 builders) sits next to the tests.
sys.path.insert(0, str(Path(__file__).parent))
