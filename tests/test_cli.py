"""The command line a maintainer expects: `rocpkg --version`, -v/-q, a subset build
(--pkg-names, --with-deps), --install-prefix, `build --json`, checked compression levels,
errors that name what is wrong and what is known, `detect` against a repository, and a
test suite that cleans up after itself."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

import rocpkg
from conftest import gpg_agents

ROCPKG = [sys.executable, "-m", "rocpkg.cli"]
TESTS = Path(__file__).resolve().parent


def rocpkg_run(*args) -> subprocess.CompletedProcess:
    return subprocess.run(ROCPKG + [str(a) for a in args], capture_output=True, text=True)


def refused(result: subprocess.CompletedProcess, where: str) -> str:
    """The one `error:` line of a run refused as bad input (exit 2, no traceback)."""
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {where}"), result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "artifacts"
    made = rocpkg_run("sample-artifacts", path, "--size-mb", "0.1", "--targets", "gfx942,gfx1100")
    assert made.returncode == 0, made.stderr
    return path


def deb_names(out: Path) -> set[str]:
    return {p.name.split("_")[0] for p in (out / "deb" / "pool" / "main").glob("*.deb")}


# -- versions and help ------------------------------------------------------------------


def test_rocpkg_version_is_the_tools_own_version():
    result = rocpkg_run("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"rocpkg {rocpkg.__version__}"


def test_a_commands_version_option_is_still_the_release_version(artifacts):
    result = rocpkg_run("plan", "-a", artifacts, "--formats", "deb", "--version", "7.2.0")
    assert result.returncode == 0, result.stderr
    assert "version 7.2.0-1" in result.stdout


def test_help_describes_the_tool_not_its_code():
    result = rocpkg_run("--help")
    assert result.returncode == 0
    assert rocpkg.__doc__.split(":")[0] in result.stdout
    assert "only place that prints" not in result.stdout
    assert "Exit status" in result.stdout


def test_every_option_of_every_command_has_help():
    from rocpkg.cli.main import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    missing = [f"{name} {'/'.join(action.option_strings) or action.dest}"
               for name, command in commands.items() for action in command._actions
               if not action.help and action.dest != "help"]
    assert missing == []


# -- -v and -q --------------------------------------------------------------------------


def test_quiet_build_prints_nothing_but_a_verbose_rebuild_lists_every_package(artifacts, tmp_path):
    out = tmp_path / "out"
    quiet = rocpkg_run("build", "-a", artifacts, "-o", out, "--formats", "deb", "-q")
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout == "" and quiet.stderr == ""
    verbose = rocpkg_run("-v", "build", "-a", artifacts, "-o", out, "--formats", "deb")
    assert verbose.returncode == 0, verbose.stderr
    up_to_date = [line for line in verbose.stderr.splitlines() if line.endswith(": up to date")]
    assert len(up_to_date) == len(deb_names(out))


def test_verbose_and_quiet_together_are_refused():
    result = rocpkg_run("-v", "-q", "--version")
    assert result.returncode == 2 and "not allowed with" in result.stderr


# -- a subset: --pkg-names and --with-deps ---------------------------------------------


def test_pkg_names_builds_only_the_named_definitions_packages(artifacts, tmp_path):
    out = tmp_path / "out"
    result = rocpkg_run("build", "-a", artifacts, "-o", out, "--formats", "deb", "--pkg-names", "rocm-fft")
    assert result.returncode == 0, result.stderr
    assert deb_names(out) == {"rocm-fft", "rocm-fft7.1", "rocm-fft-host7.1", "rocm-fft7.1-gfx942",
                              "rocm-fft7.1-gfx1100"}
    manifest = json.loads((out / "manifest.json").read_text())
    assert {p["name"] for p in manifest["packages"]} == deb_names(out)


def test_with_deps_adds_the_in_release_dependency_closure(artifacts, tmp_path):
    out = tmp_path / "out"
    result = rocpkg_run("build", "-a", artifacts, "-o", out, "--formats", "deb", "--pkg-names",
                        "rocm-fft7.1-gfx942", "--with-deps")
    assert result.returncode == 0, result.stderr
    built = deb_names(out)
    assert {"rocm-fft7.1-gfx942", "rocm-fft-host7.1"} <= built
    assert "rocm-fft7.1-gfx1100" not in built
    # every in-release dependency of what was built was built too: apt can install it
    for deb in (out / "deb" / "pool" / "main").glob("*.deb"):
        depends = subprocess.run(["dpkg-deb", "-f", str(deb), "Depends"], capture_output=True, text=True).stdout
        for relation in filter(None, (r.strip() for r in depends.split(","))):
            name = relation.split()[0]
            assert name in built or not name.startswith("rocm-"), (deb.name, name)


def test_plan_shows_the_same_subset_in_either_spelling(artifacts):
    result = rocpkg_run("plan", "-a", artifacts, "--formats", "rpm", "--pkg-names", "rocm-gfx110X", "--json")
    assert result.returncode == 0, result.stderr
    names = [p["name"] for p in json.loads(result.stdout)["packages"]]
    assert [n.lower() for n in names] == ["rocm-gfx110x"]


def test_an_unknown_package_name_is_refused_with_the_closest_known(artifacts):
    line = refused(rocpkg_run("plan", "-a", artifacts, "--pkg-names", "rocm-fftt"), "--pkg-names")
    assert "'rocm-fftt'" in line and "did you mean 'rocm-fft'" in line


def test_with_deps_alone_is_refused(artifacts, tmp_path):
    refused(rocpkg_run("build", "-a", artifacts, "-o", tmp_path / "out", "--with-deps"), "--with-deps")
    assert not (tmp_path / "out").exists()


# -- --install-prefix --------------------------------------------------------------------


def test_install_prefix_places_a_therock_list_form_release(shared_dir, tmp_path):
    config = tmp_path / "package.json"
    shutil.copyfile(shared_dir / "fixtures" / "therock" / "package.json", config)
    artifacts = tmp_path / "artifacts"
    made = rocpkg_run("sample-artifacts", artifacts, "-c", config, "--size-mb", "0.05", "--targets", "gfx942")
    assert made.returncode == 0, made.stderr
    result = rocpkg_run("plan", "-c", config, "-a", artifacts, "--formats", "deb", "--json",
                        "--install-prefix", "/opt/rocm/core")
    assert result.returncode == 0, result.stderr
    paths = [f["path"] for p in json.loads(result.stdout)["packages"] for f in p["file_list"]]
    # /opt/rocm itself is owned by every package that installs under it (rocpkg.plan.layout)
    assert paths and all(p.startswith("/opt/rocm/core/") or p in ("/opt/rocm/core", "/opt/rocm") for p in paths)


def test_a_relative_install_prefix_is_refused(artifacts):
    line = refused(rocpkg_run("plan", "-a", artifacts, "--install-prefix", "opt/rocm"), "--install-prefix")
    assert "absolute" in line


# -- build --json and the summary ------------------------------------------------------------


def test_build_json_gives_the_tables_numbers(artifacts, tmp_path):
    out = tmp_path / "out"
    table = rocpkg_run("build", "-a", artifacts, "-o", out, "--formats", "deb")
    assert table.returncode == 0, table.stderr
    result = rocpkg_run("build", "-a", artifacts, "-o", out, "--formats", "deb", "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["schema"] == "rocpkg-build/1"
    assert doc["totals"]["up_to_date"] == len(doc["packages"]) == len(deb_names(out))
    assert doc["totals"]["bytes_out"] == sum(p.stat().st_size for p in (out / "deb").rglob("*.deb"))
    for row in doc["rows"]:  # the table's rows, as numbers
        count = f"{row['built'] + row['up_to_date']}"
        assert any(line.split()[:2] == [row["format"], row["kind"]] and count in line.split()
                   for line in table.stdout.splitlines())


def test_a_small_build_reports_a_rate_in_a_unit_that_fits(artifacts, tmp_path):
    result = rocpkg_run("build", "-a", artifacts, "-o", tmp_path / "out", "--formats", "deb")
    assert result.returncode == 0, result.stderr
    last = result.stdout.strip().splitlines()[-1]
    assert "/s of payload" in last and "(0 MiB/s" not in last and " 0 B/s" not in last


@pytest.mark.parametrize("options,where", [
    (["--level", "99"], "--level"),
    (["--level", "-1000"], "--level"),
    (["--compression", "xz", "--level", "10"], "--level"),
    (["--compression", "gzip", "--level", "0"], "--level"),
])
def test_a_compression_level_outside_its_kinds_range_is_refused(artifacts, tmp_path, options, where):
    refused(rocpkg_run("build", "-a", artifacts, "-o", tmp_path / "out", *options), where)
    assert not (tmp_path / "out").exists()


def test_a_settings_compression_level_outside_its_range_names_the_setting(tmp_path, artifacts):
    config = json.loads((TESTS.parent / "package.json").read_text())
    config["settings"]["compression_level"] = 22
    path = tmp_path / "package.json"
    path.write_text(json.dumps(config))
    result = rocpkg_run("plan", "-c", path, "-a", artifacts)
    assert result.returncode == 2 and "settings.compression_level: zstd takes a level from 1 to 19" in result.stderr


def test_demo_jobs_below_one_is_refused(tmp_path):
    refused(rocpkg_run("demo", tmp_path / "demo", "-j", "0"), "-j")


# -- errors that say what is wrong ---------------------------------------------------------


def test_no_files_without_json_is_refused(artifacts):
    refused(rocpkg_run("plan", "-a", artifacts, "--no-files"), "--no-files")


def test_an_empty_artifacts_directory_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    line = refused(rocpkg_run("plan", "-a", tmp_path / "empty"), str(tmp_path / "empty"))
    assert "no artifact directories" in line


def test_an_artifacts_path_that_is_a_file_says_not_a_directory(tmp_path):
    (tmp_path / "file").write_text("x")
    assert "not a directory" in refused(rocpkg_run("plan", "-a", tmp_path / "file"), str(tmp_path / "file"))


def test_kpack_verify_on_a_directory_names_it(tmp_path):
    for command in ("verify", "info", "ls"):
        result = subprocess.run([sys.executable, "-m", "kpack.cli", command, str(tmp_path)],
                                capture_output=True, text=True)
        assert result.returncode == 2
        assert result.stderr.strip() == f"error: {tmp_path}: is a directory, not a regular file"


def bundled_config_with(tmp_path: Path, **definition_keys) -> Path:
    config = json.loads((TESTS.parent / "package.json").read_text())
    config["packages"][0].update(definition_keys)
    path = tmp_path / "package.json"
    path.write_text(json.dumps(config))
    return path


def test_an_unknown_key_suggests_the_known_one(tmp_path, artifacts):
    path = bundled_config_with(tmp_path, DEBDepend=["libc6"])
    result = rocpkg_run("plan", "-c", path, "-a", artifacts)
    line = refused(result, str(path))
    assert ".DEBDepend: unknown key (did you mean 'DEBDepends'?)" in line


def test_unknown_keys_warn_mode_builds_and_lists_them(tmp_path, artifacts):
    path = bundled_config_with(tmp_path, Future_Key="x")
    result = rocpkg_run("plan", "-c", path, "-a", artifacts, "--formats", "deb", "--unknown-keys", "warn")
    assert result.returncode == 0, result.stderr
    assert [line for line in result.stderr.splitlines() if "Future_Key" in line] == [
        f"warning: {path}: packages[0]({json.loads(path.read_text())['packages'][0]['Package']}).Future_Key: "
        "unknown key; ignored"]


def test_unknown_keys_warn_mode_as_a_setting(tmp_path, artifacts):
    path = bundled_config_with(tmp_path, Future_Key="x")
    config = json.loads(path.read_text())
    config["settings"]["unknown_keys"] = "warn"
    path.write_text(json.dumps(config))
    result = rocpkg_run("plan", "-c", path, "-a", artifacts, "--formats", "deb")
    assert result.returncode == 0 and "Future_Key: unknown key; ignored" in result.stderr


def test_an_unknown_keys_mode_that_does_not_exist_is_refused(artifacts):
    result = rocpkg_run("plan", "-a", artifacts, "--unknown-keys", "ignore")
    assert result.returncode == 2 and "--unknown-keys" in result.stderr and "Traceback" not in result.stderr


# -- detect against what exists --------------------------------------------------------------


def fake_gpu_sysfs(root: Path, targets: dict[int, str]) -> Path:
    """KFD topology nodes: gfx_target_version -> name."""
    for node, (version, name) in enumerate(targets.items()):
        directory = root / "class/kfd/kfd/topology/nodes" / str(node)
        directory.mkdir(parents=True)
        (directory / "properties").write_text(f"gfx_target_version {version}\n")
        (directory / "name").write_text(f"{name}\n")
    return root


def test_detect_suggests_only_families_the_repository_has(artifacts, tmp_path):
    out = tmp_path / "out"
    assert rocpkg_run("build", "-a", artifacts, "-o", out, "-q").returncode == 0
    sysfs = fake_gpu_sysfs(tmp_path / "sys", {110501: "gfx1151", 90402: "gfx942"})
    result = rocpkg_run("detect", "--sysfs", sysfs, "--repo", out)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "node 0: gfx1151, family gfx115X",
        f"  the repository {out} has no package for gfx115X (it serves: gfx110X, gfx94X)",
        "node 1: gfx942, family gfx94X",
        "  apt install rocm-gfx94x",
        "  dnf install rocm-gfx94X",
    ]


def test_detect_checks_against_a_plan_too(artifacts, tmp_path):
    sysfs = fake_gpu_sysfs(tmp_path / "sys", {110501: "gfx1151"})
    result = rocpkg_run("detect", "--sysfs", sysfs, "-a", artifacts)
    assert result.returncode == 0, result.stderr
    assert "install" not in result.stdout and "has no package for gfx115X" in result.stdout


def test_detect_on_a_tree_without_a_manifest_is_refused(tmp_path):
    sysfs = fake_gpu_sysfs(tmp_path / "sys", {90402: "gfx942"})
    refused(rocpkg_run("detect", "--sysfs", sysfs, "--repo", tmp_path), str(tmp_path / "manifest.json"))


# -- a test suite that cleans up after itself --------------------------------------------------

LEAKY_TEST = '''
import subprocess


def test_leaves_a_gpg_agent_and_a_file(tmp_path):
    home = tmp_path / "g"
    home.mkdir(mode=0o700)
    subprocess.run(["gpg", "--homedir", str(home), "--batch", "--passphrase", "", "--quick-gen-key",
                    "leak <leak@example.org>", "rsa2048", "sign", "never"], check=True, capture_output=True)
    (tmp_path / "payload.bin").write_bytes(bytes(1 << 20))
'''


@pytest.mark.skipif(not shutil.which("gpg"), reason="gpg is not installed")
def test_a_passing_run_leaves_no_temporaries_and_no_gpg_agent():
    # a short TMPDIR: gpg-agent's socket path must stay under ~100 bytes
    tmp = tempfile.mkdtemp(prefix="tc", dir="/tmp")
    try:
        (Path(tmp) / "test_leaky.py").write_text(textwrap.dedent(LEAKY_TEST))
        env = {**os.environ, "TMPDIR": os.path.join(tmp, "t"),
               "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
        os.mkdir(env["TMPDIR"])
        result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider",
                                 "-c", str(TESTS.parent / "pyproject.toml"), "--rootdir", tmp,
                                 os.path.join(tmp, "test_leaky.py")],
                                capture_output=True, text=True, env=env, cwd=tmp)
        assert result.returncode == 0, result.stdout + result.stderr
        assert [p for p in Path(env["TMPDIR"]).rglob("*") if not p.is_dir()] == []
        assert [home for home in gpg_agents().values() if home.startswith(tmp)] == []
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
