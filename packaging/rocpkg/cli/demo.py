"""`rocpkg demo OUT`: the whole story on the defaults, in under a minute — sample
artifacts for targets of three families, both package formats, both repositories
signed with a throwaway key (when gpg exists), and the offline checks. Library: no
printing; the CLI tells the user how to point apt and dnf at OUT.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

from rocpkg.builder import run as b
from rocpkg.store.dates import source_date_epoch
from rocpkg.repo.index import publish_repositories
from rocpkg.errors import RocpkgInputError
from rocpkg.formats.registry import REGISTERED
from rocpkg.model import BuildOptions

DEMO_TARGETS = ("gfx942", "gfx1100", "gfx1101", "gfx1201")
# OUT holds a demo: a later demo run may empty it (but its GnuPG home) and start afresh
DEMO_STAMP = ".rocpkg-demo"
_KEPT = {DEMO_STAMP, "gnupg"}
DEMO_KEY_UID = "rocpkg demo key <demo@rocpkg.invalid>"
# gpg-agent's socket lives in the GnuPG home; a unix socket path holds ~107 bytes.
_SOCKET_PATH_MAX = 100


@dataclass
class DemoResult:
    out_dir: str
    artifacts: str
    plan: object
    build: b.BuildResult
    suite: str
    gnupg_home: str = ""                # "" when unsigned (no gpg)
    key_fingerprint: str = ""
    snippets: dict[str, str] = field(default_factory=dict)    # format -> its client snippet (OUT/rocm.list...)
    keyring: str = ""                   # OUT/rocm.gpg (binary, for apt signed-by)
    armored_key: str = ""               # OUT/rocm.asc (for rpm --import / gpgkey=)
    verify: object = None               # rocpkg.verify.run's report, when that module exists
    steps: list[tuple[str, float]] = field(default_factory=list)


def _demo_key(out_dir: str) -> str | None:
    """A GnuPG home with an unprotected RSA signing key: OUT/gnupg (kept and reused, so a
    second demo run signs with the same key), or a short temporary home when OUT's path
    is too long for gpg-agent's socket. None when gpg is not installed."""
    if shutil.which("gpg") is None:
        return None
    home = os.path.join(out_dir, "gnupg")
    if len(home) + len("/S.gpg-agent.browser") > _SOCKET_PATH_MAX:
        home = tempfile.mkdtemp(prefix="rocpkg-gpg-")
    os.makedirs(home, mode=0o700, exist_ok=True)
    os.chmod(home, 0o700)
    listed = subprocess.run(["gpg", "--homedir", home, "--batch", "--list-secret-keys", DEMO_KEY_UID],
                            capture_output=True)
    if listed.returncode != 0:
        subprocess.run(["gpg", "--homedir", home, "--batch", "--passphrase", "", "--quick-gen-key",
                        DEMO_KEY_UID, "rsa3072", "sign", "never"], check=True, capture_output=True)
    return home


def _fresh_demo_dir(out_dir: str) -> None:
    """OUT new, empty, or an earlier demo's, which is emptied (its key kept): the demo
    makes new sample artifacts each run, and a release already published in OUT is never
    rebuilt from changed inputs (rocpkg.store.releases), so a second run into the same OUT would
    be refused. Any other directory is refused, never emptied: `rocpkg demo ~/repo` must not
    touch a tree of the user's."""
    try:
        names = os.listdir(out_dir)
    except FileNotFoundError:
        names = []
    except OSError as exc:
        raise RocpkgInputError((out_dir, f"cannot be listed: {exc.strerror}")) from None
    if names and DEMO_STAMP not in names:
        raise RocpkgInputError((out_dir, f"exists and holds no earlier rocpkg demo (no {DEMO_STAMP} in it): name a "
                                         "new or empty directory, or remove this one"))
    for name in names:
        if name in _KEPT:
            continue
        path = os.path.join(out_dir, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, DEMO_STAMP), "w") as fh:
        fh.write("made by `rocpkg demo`: the next demo run into this directory empties it\n")


def stop_gpg_agent(home: str) -> None:
    """The agent gpg started for the demo key; nothing else uses it afterwards."""
    if home and shutil.which("gpgconf"):
        subprocess.run(["gpgconf", "--homedir", home, "--kill", "gpg-agent"], capture_output=True)


def run_demo(out_dir: str | os.PathLike, *, targets=DEMO_TARGETS, jobs: int | None = None,
             progress=None, size_mb: float = 1.0) -> DemoResult:
    """Sample artifacts into OUT/artifacts, build deb+rpm into OUT, publish both
    repositories, verify. OUT is new, empty or an earlier demo's, emptied first
    (_fresh_demo_dir)."""
    from rocpkg.inputs.catalog import scan
    from rocpkg.inputs.config import load_config
    from rocpkg.plan.make import make_plan
    from rocpkg.inputs.sample import make_sample_artifacts

    out_dir = os.path.abspath(os.fspath(out_dir))
    steps: list[tuple[str, float]] = []
    clock = time.perf_counter()

    def step(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        steps.append((name, now - clock))
        clock = now

    _fresh_demo_dir(out_dir)
    config = load_config(None)
    artifacts = os.path.join(out_dir, "artifacts")
    make_sample_artifacts(artifacts, config, targets=list(targets), size_mb=size_mb)
    step("sample artifacts")
    plan = make_plan(config, scan(artifacts, config.settings["families"]))
    step("plan")
    sde = source_date_epoch(plan.settings)
    home = _demo_key(out_dir)
    signer = None
    if home:
        from rocpkg.formats.sign import Signer

        signer = Signer(home, DEMO_KEY_UID, signature_time=sde)
        step("demo signing key")
    try:
        options = BuildOptions(source_date_epoch=sde, compression=plan.settings["compression"],
                               compression_level=plan.settings["compression_level"])
        built = b.build_release(plan, out_dir, options=options, jobs=jobs, progress=progress, signer=signer)
        step("build")
        suite = plan.settings["suite"]
        snippets, _ = publish_repositories(out_dir, suite=suite, signer=signer, source_date_epoch=sde)
        step("repositories")
        result = DemoResult(out_dir, artifacts, plan, built, suite, gnupg_home=home or "",
                            key_fingerprint=signer.fingerprint if signer else "",
                            snippets={f: p for f, p in snippets.items() if f in REGISTERED}, steps=steps)
        if signer:
            from rocpkg.formats.sign import ARMORED_KEY_NAME, KEYRING_NAME

            result.keyring = os.path.join(out_dir, KEYRING_NAME)
            result.armored_key = os.path.join(out_dir, ARMORED_KEY_NAME)
    finally:
        if home:
            stop_gpg_agent(home)
    try:
        from rocpkg.verify.run import verify_tree
    except ImportError:
        verify_tree = None
    if verify_tree is not None:
        result.verify = verify_tree(out_dir)
        step("verify")
    return result
