"""The interop tests use the shared helpers of Tests/support (the tandem binary, fresh identities)."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "support"))
