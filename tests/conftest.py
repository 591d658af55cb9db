"""Shared pytest fixtures."""
from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The read-only shared directory (fixtures/, DESIGN.md): $SHARED_DIR, else `../shared`
    next to the repository root. Tests that need it skip when it is absent."""
    candidate = Path(os.environ["SHARED_DIR"]) if os.environ.get("SHARED_DIR") else REPO_ROOT.parent / "shared"
    if not (candidate / "fixtures").is_dir():
        pytest.skip(f"shared fixtures not found at {candidate}")
    return candidate


@pytest.fixture(scope="module")
def signer():
    """A throwaway gpg key (signatures dated 2023-11-14, so that they are reproducible),
    its agent stopped when the module is done."""
    from repo_helpers import kill_gpg_agent, make_signer

    signer, home = make_signer(signature_time=1700000000)
    yield signer
    kill_gpg_agent(home)


@pytest.fixture(scope="session")
def reference_loader(shared_dir):
    """rocm-kpack's reference runtime as an oracle: `reference_loader(binary, isa, co_index)
    -> OracleResult`, or `.lookup([...])` for a batch. Built once per machine (cached under
    ~/.cache/rocpkg-tests); skips when ../shared or the C++ toolchain is absent."""
    from reference_runtime import build_reference_loader, missing_tools

    if not (shared_dir / "reference" / "rocm-kpack" / "runtime").is_dir():
        pytest.skip("rocm-kpack reference runtime not in the shared directory")
    missing = missing_tools()
    if missing:
        pytest.skip(f"cannot build the reference runtime: missing {', '.join(missing)} "
                    f"(scripts/install-system-tools installs them)")
    return build_reference_loader(shared_dir)


def gpg_agents() -> dict[int, str]:
    """pid -> GnuPG home of this user's running gpg-agents (gpg starts one per home with
    `--homedir HOME` on its command line and leaves it running)."""
    agents = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid != os.getuid():
                continue
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile
            continue
        if os.path.basename(argv[0]) == b"gpg-agent" and b"--homedir" in argv[:-1]:
            agents[int(entry)] = os.fsdecode(argv[argv.index(b"--homedir") + 1])
    return agents


@pytest.fixture(scope="session", autouse=True)
def stop_gpg_agents(tmp_path_factory):
    """At the end of the session, stop the gpg-agents of every GnuPG home this session made
    (under its temporary directory, or by repo_helpers.make_signer), so that test runs do
    not pile up agents; agents of other homes (the user's, another run's) are left alone."""
    from repo_helpers import GPG_HOMES

    before = set(gpg_agents())
    yield
    roots = [os.path.realpath(tmp_path_factory.getbasetemp())] + [os.path.realpath(h) for h in GPG_HOMES]
    for pid, home in gpg_agents().items():
        home = os.path.realpath(home)
        if pid not in before and any(home == root or home.startswith(root + os.sep) for root in roots):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass


@pytest.fixture(scope="module")
def small_release(tmp_path_factory) -> Path:
    """A two-target sample release (gfx942, gfx1100) made once per module: read it only."""
    from rocpkg.inputs.config import load_config
    from rocpkg.inputs.sample import make_sample_artifacts

    root = tmp_path_factory.mktemp("pristine")
    make_sample_artifacts(root / "artifacts", load_config(None), targets=["gfx942", "gfx1100"], size_mb=0.3)
    return root / "artifacts"


@pytest.fixture
def small_release_copy(small_release, tmp_path) -> Path:
    """A copy of small_release this test may spoil."""
    copy = tmp_path / "artifacts"
    shutil.copytree(small_release, copy, symlinks=True)
    return copy
