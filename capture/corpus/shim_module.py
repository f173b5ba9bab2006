"""The capture shim (capture/shim_py/sitecustomize.py) as a module, loaded from its file, for the
corpus scripts that time what a plan runs: its swap hooks, its probe's chain. Without
steptrace's environment it installs nothing."""
import importlib.util
import os
import sys


def load():
    path = os.path.join(os.path.dirname(__file__), "..", "shim_py", "sitecustomize.py")
    spec = importlib.util.spec_from_file_location("steptrace_shim", path)
    m = importlib.util.module_from_spec(spec)
    sys.modules["steptrace_shim"] = m
    spec.loader.exec_module(m)
    return m
