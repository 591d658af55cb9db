"""Shared pytest fixtures."""
from __future__ import annotations

import os
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
