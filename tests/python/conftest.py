"""Fixtures of the Python package's tests (run by ctest: tests/CMakeLists.txt).

The package under test is whichever `import ifusim` finds: the build tree's (ctest sets
PYTHONPATH to <build>/python) or an installed one (scripts/test.sh's fresh virtual
environment). IFUSIM_CLI names the command-line program the cubes are compared with.
"""

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MUSE_EXAMPLE = ROOT / "configs" / "examples" / "muse_tng_mastar.json"


def pytest_report_header(config):
    import ifusim

    return f"ifusim {ifusim.__version__} from {Path(ifusim.__file__).parent}"


@pytest.fixture(scope="session")
def cli():
    path = os.environ.get("IFUSIM_CLI")
    if not path or not Path(path).is_file():
        pytest.fail("IFUSIM_CLI must name the ifusim program of the same build")
    return path


@pytest.fixture(scope="session")
def muse_cli_output(cli, tmp_path_factory):
    """The CLI's run of the MUSE example: its output folder."""
    out = tmp_path_factory.mktemp("cli") / "out"
    subprocess.run(
        [cli, "run", str(MUSE_EXAMPLE), "--out", str(out), "--no-progress",
         "--set", "output.hdf5=true"],
        check=True,
        capture_output=True,
    )
    return out


@pytest.fixture(scope="session")
def muse_cube():
    import ifusim

    return ifusim.run(MUSE_EXAMPLE)
