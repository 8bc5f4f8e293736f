"""Why the PyTorch tests cannot run here, or None: shared by the tests that train with Debian's python3-torch."""

import os
import sys
from pathlib import Path

SKIP = 77  # CTest's SKIP_RETURN_CODE for these tests


def skip_reason():
    try:
        import torch  # noqa: F401
    except ImportError as error:
        return f"PyTorch is not importable by {sys.executable} ({error}); apt-get install python3-torch"
    library = os.environ.get("TESSERA_TORCH_CPU_LIBRARY")
    if library is not None and not Path(library).is_file():
        return f"{library} was not built (Debian's libtorch-dev was not found when configuring)"
    return None
