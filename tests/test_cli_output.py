"""What the command line prints, run as a user runs it: --json on every command (each a
document whose "schema" names it), -q honoured, one cause said once with a count, the
closest names instead of whole tables, progress only on a terminal, --help with examples,
and the shell completion and the manual page generated from the parser.

The small two-release OUT of tests/test_maintainer_look.py is built once and copied per
case where a case changes it."""
from __future__ import annotations

import json
import os
import pty
import re
import shutil
import subprocess
import sys

import pytest
from cli_run import refusal_lines, snapshot
from test_detect import gpu_properties, fake_sysfs
from test_hostile_out import REPO, run
from test_maintainer_look import R1, R2, two_releases  # noqa: F401  (the module's fixture)


@pytest.fixture
def out(two_releases, tmp_path):  # noqa: F811
    shutil.copytree(two_releases / "out", tmp_path / "out", symlinks=True)
    return tmp_path / "out"


def ok(*args, env=None) -> subprocess.CompletedProcess:
    done = run(*args, env=env)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr
    assert "\x1b[" not in done.stdout + done.stderr      # no progress line, no colour in a pipe
    return done


def document(done: subprocess.CompletedProcess, schema: str) -> dict:
    doc = json.loads(done.stdout)
    assert doc["schema"] == schema, doc
    return doc


# -- --json on every command -------------------------------------------------------------------

def test_repo_prune_promote_export_and_publish_speak_json(out, tmp_path):
    doc = document(ok("repo", out, "--json"), "rocpkg-repo/1")
    assert doc["signed_by"] is None and doc["suite"] == "stable"
    assert doc["snippets"] == {"deb": str(out / "rocm.list"), "rpm": str(out / "rocm.repo"),
                               "pacman": str(out / "rocm.pacman.conf")}

    before = snapshot(out)
    doc = document(ok("prune", out, "--keep", "1", "--dry-run", "--json"), "rocpkg-prune/1")
    assert (doc["removed"], doc["kept"], doc["dry_run"], len(doc["files"])) == ([R1], [R2], True, 26)
    assert snapshot(out) == before

    doc = document(ok("promote", out, tmp_path / "stable", "--release", R1, "--json"), "rocpkg-promote/1")
    assert doc["release"] == R1 and doc["kept"] == [R1] and len(doc["files"]) == 26
    assert doc["out"] == str(tmp_path / "stable") and doc["src"] == str(out)
    assert all(os.path.isfile(tmp_path / "stable" / f) for f in doc["files"])

    doc = document(ok("export", out, tmp_path / "bundle", "ns-base", "--json"), "rocpkg-export/1")
    assert doc["packages"]["deb"] and doc["tarball"] == str(tmp_path / "bundle.tar")
    assert doc["size"] == os.path.getsize(tmp_path / "bundle.tar") and re.fullmatch(r"[0-9a-f]{64}", doc["sha256"])

    doc = document(ok("publish", out, tmp_path / "www", "--json"), "rocpkg-publish/1")
    assert doc["sent"] and doc["bytes_sent"] == sum(os.path.getsize(tmp_path / "www" / f) for f in doc["sent"])
    again = document(ok("publish", out, tmp_path / "www", "--json"), "rocpkg-publish/1")
    assert again["sent"] == [] and again["unchanged"] == len(doc["sent"]) and again["removed"] == []


def test_detect_speaks_json(tmp_path, two_releases):  # noqa: F811
    sysfs = fake_sysfs(tmp_path / "sys", [(gpu_properties(110000, 29772), "gfx1100\n"),
                                          (gpu_properties(90402, 29857), "gfx942\n")])
    doc = document(ok("detect", "--sysfs", sysfs, "--json"), "rocpkg-detect/1")
    assert [(g["node"], g["target"], g["family"]) for g in doc["gpus"]] == [(0, "gfx1100", "gfx110X"),
                                                                            (1, "gfx942", "gfx94X")]
    assert [i["command"] for i in doc["gpus"][0]["install"]] == ["apt install rocm-gfx110x", "dnf install rocm-gfx110X"]
    doc = document(ok("detect", "--sysfs", sysfs, "--repo", two_releases / "out", "--json",
                      "-c", two_releases / "package.json"), "rocpkg-detect/1")
    assert doc["checked_against"] == f"the repository {two_releases / 'out'}"
    assert doc["gpus"][1]["install"] == [] and doc["gpus"][1]["served"] == ["gfx110X"]
    empty = document(ok("detect", "--sysfs", tmp_path / "none", "--json"), "rocpkg-detect/1")
    assert empty["gpus"] == []


# -- -q -------------------------------------------------------------------------------------------

def test_repo_prune_and_rm_quiet_say_the_result_only(out):
    done = ok("repo", out, "-q")
    assert done.stdout == "" and done.stderr.startswith("warning: unsigned repository")
    assert ok("prune", out, "--keep", "2", "-q").stdout.splitlines() == [f"removed 0 releases (none), 0 package "
                                                                        f"files; kept {R1}, {R2}"]
    assert ok("rm", out, R1, "-q").stdout.splitlines() == [f"removed release {R1}: 26 package files; OUT holds {R2}"]


def test_verify_quiet_says_the_verdict_only(two_releases):  # noqa: F811
    done = ok("verify", two_releases / "out", "-q")
    assert done.stdout.splitlines() == ["OK: no problem found"]
    assert "packages" in ok("verify", two_releases / "out").stdout


def test_demo_quiet_says_the_verdict_only(tmp_path):
    done = ok("-q", "demo", tmp_path / "demo", "-j", "2")
    assert done.stdout.splitlines() == ["verify: ok"], done.stdout
    assert done.stderr.count("\n") <= 2, done.stderr     # no per-package progress lines


# -- one cause, one line; the closest names -------------------------------------------------------

def test_a_rebuild_with_changed_inputs_is_one_line_with_a_count(out, two_releases, tmp_path):  # noqa: F811
    config = json.loads((two_releases / "package.json").read_text())
    config["settings"]["maintainer"] = "Someone Else <else@example.org>"
    (tmp_path / "changed.json").write_text(json.dumps(config))
    args = ("build", "-c", tmp_path / "changed.json", "-a", two_releases / "artifacts", "-o", out,
            "--release", "2", "-q", "-j", "2")
    before = snapshot(out)
    errors = refusal_lines(run(*args, env={"SOURCE_DATE_EPOCH": "1710000000"}), ["already published"])
    assert len(errors) == 2 and re.fullmatch(r"error: \.\.\. and (\d+) more like it \(-v shows every one\)", errors[1])
    hidden = int(errors[1].split()[3])
    assert hidden >= 25
    every = refusal_lines(run(*args[:-3], "-v", "-j", "2", env={"SOURCE_DATE_EPOCH": "1710000000"}),
                          ["already published"])
    assert len(every) == hidden + 1 and errors[0] in every
    assert snapshot(out) == before


def test_a_promote_conflict_is_one_line_with_a_count(out, tmp_path):
    dst = tmp_path / "stable"
    ok("promote", out, dst, "--release", R1, "-q")
    for package in [*dst.glob("deb/pool/main/*.deb"), *dst.glob("rpm/*/*.rpm")]:
        package.write_bytes(package.read_bytes() + b"\0")         # other bytes under the same names
    before = snapshot(dst)
    errors = refusal_lines(run("promote", out, dst, "--release", R1), ["DST already has"])
    assert len(errors) == 2 and errors[1] == "error: ... and 25 more like it (-v shows every one)"
    assert len(refusal_lines(run("promote", out, dst, "--release", R1, "-v"), ["DST already has"])) == 26
    assert snapshot(dst) == before


def test_an_unknown_target_names_the_closest_not_the_whole_table(two_releases):  # noqa: F811
    done = run("plan", "-c", two_releases / "package.json", "-a", two_releases / "artifacts", "--targets", "gfx1110")
    (line,) = refusal_lines(done, ["--targets", "gfx1110", "closest: gfx1100, gfx1101"])
    assert len(line) < 300 and "gfx600" not in line


# -- progress: on a terminal only --------------------------------------------------------------

def test_publish_shows_progress_on_a_terminal_and_none_in_a_pipe(out, tmp_path):
    piped = ok("publish", out, tmp_path / "piped")
    assert piped.stdout.startswith(f"published {out} to {tmp_path / 'piped'}: ")
    primary, secondary = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env.update(PYTHONPATH=os.pathsep.join([str(REPO / "packaging"), str(REPO), os.environ.get("PYTHONPATH", "")]),
               TERM="xterm", COLUMNS="120")
    proc = subprocess.Popen([sys.executable, "-m", "rocpkg.cli", "publish", str(out), str(tmp_path / "tty")],
                            stdin=secondary, stdout=secondary, stderr=secondary, env=env)
    os.close(secondary)
    seen = b""
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:         # EIO: the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    assert proc.wait(timeout=120) == 0, seen
    os.close(primary)
    text = seen.decode(errors="replace")
    assert "\x1b[2Kpublishing " in text          # the transient line, rewritten in place
    assert f"published {out} to {tmp_path / 'tty'}: " in text


# -- --help, completion, man -------------------------------------------------------------------

COMMANDS = ("plan", "build", "repo", "verify", "prune", "promote", "export", "publish", "sample-artifacts",
            "detect", "demo", "ls", "show", "diff", "rm", "completion", "man")


def test_every_command_has_help_with_examples():
    for command in COMMANDS:
        text = ok(command, "--help").stdout
        examples = text.split("\nexamples:\n", 1)[1].splitlines()
        assert examples and all(line.startswith("  ") for line in examples), (command, text)
        assert any(line.strip().startswith(f"rocpkg {command}") for line in examples), command


def test_bash_completion_is_generated_from_the_parser(tmp_path):
    script = tmp_path / "rocpkg.bash"
    script.write_text(ok("completion", "bash").stdout)
    assert subprocess.run(["bash", "-n", script], capture_output=True).returncode == 0
    # what bash offers after `rocpkg r` and after `rocpkg rm --a`
    probe = (f"source {script}; "
             "COMP_WORDS=(rocpkg r); COMP_CWORD=1; COMP_LINE='rocpkg r'; COMP_POINT=8; "
             "$(complete -p rocpkg | sed -E 's/.*-F ([^ ]+).*/\\1/') rocpkg r rocpkg; echo \"${COMPREPLY[@]}\"; "
             "COMP_WORDS=(rocpkg rm --a); COMP_CWORD=2; COMP_LINE='rocpkg rm --a'; COMP_POINT=13; "
             "$(complete -p rocpkg | sed -E 's/.*-F ([^ ]+).*/\\1/') rocpkg --a rm; echo \"${COMPREPLY[@]}\"")
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()
    assert set(first.split()) == {"repo", "rm"}
    assert second.split() == ["--allow-newest"]


def test_zsh_completion_is_generated_from_the_parser():
    text = ok("completion", "zsh").stdout
    assert text.startswith("#compdef rocpkg")
    assert "--allow-newest" in text and "--json" in text
    if shutil.which("zsh"):
        assert subprocess.run(["zsh", "-n", "-c", text], capture_output=True).returncode == 0


def test_the_man_page_renders(tmp_path):
    page = tmp_path / "rocpkg.1"
    page.write_text(ok("man").stdout)
    assert page.read_text().startswith(".TH ROCPKG")
    if shutil.which("man"):
        shown = subprocess.run(["man", "-l", page], capture_output=True, text=True, env={**os.environ, "MANWIDTH": "100",
                                                                                      "MANPAGER": "cat", "PAGER": "cat"})
        assert shown.returncode == 0, shown.stderr
        text = re.sub(r".\x08", "", shown.stdout)
        assert "rocpkg - native packages and repositories" in text
        for heading in ("SYNOPSIS", "EXAMPLES"):
            assert f"\n{heading}\n" in text
        assert "rocpkg rm" in text and "--allow-newest" in text
    if shutil.which("groff"):
        checked = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", page], capture_output=True, text=True)
        assert checked.returncode == 0 and not checked.stderr, checked.stderr
