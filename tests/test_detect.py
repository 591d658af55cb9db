"""`rocpkg detect`: an end user learns which family package serves their GPUs, from the
amdgpu driver's KFD topology (here fake sysfs trees laid out like the real one)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rocpkg.inputs.detect import detect_gpus, target_from_version

CPU_PROPERTIES = "cpu_cores_count 16\nsimd_count 0\nmem_banks_count 1\ngfx_target_version 0\n"


def gpu_properties(gfx_target_version: int, device_id: int) -> str:
    return (f"cpu_cores_count 0\nsimd_count 256\nmem_banks_count 1\ncaches_count 207\n"
            f"gfx_target_version {gfx_target_version}\nvendor_id 4098\ndevice_id {device_id}\n"
            f"location_id 768\ndrm_render_minor 128\n")


def fake_sysfs(root: Path, nodes: list[tuple[str, str]]) -> Path:
    """nodes: (properties text, name file text) per node number."""
    base = root / "class/kfd/kfd/topology/nodes"
    for number, (properties, name) in enumerate(nodes):
        node = base / str(number)
        node.mkdir(parents=True)
        (node / "properties").write_text(properties)
        (node / "name").write_text(name)
    (root / "class/kfd/kfd/topology/generation_id").write_text("1\n")
    return root


def run_detect(sysfs: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rocpkg.cli", "detect", "--sysfs", str(sysfs)],
                          capture_output=True, text=True)


@pytest.mark.parametrize("value,target", [(110000, "gfx1100"), (90402, "gfx942"), (90010, "gfx90a"),
                                          (100300, "gfx1030"), (120001, "gfx1201"), (90012, "gfx90c"),
                                          (110501, "gfx1151")])
def test_gfx_target_version_decodes_with_hex_minor_and_stepping(value, target):
    assert target_from_version(value) == target


def test_a_workstation_with_an_mi300_and_a_radeon_gets_one_install_line_per_gpu(tmp_path):
    sysfs = fake_sysfs(tmp_path, [(CPU_PROPERTIES, "\n"), (gpu_properties(90402, 29857), "gfx942\n"),
                                  (gpu_properties(110000, 29772), "gfx1100\n")])
    result = run_detect(sysfs)
    assert result.returncode == 0, result.stderr
    print(result.stdout)
    lines = result.stdout.splitlines()
    assert lines == [
        "node 1: gfx942, family gfx94X",
        "  apt install rocm-gfx94x",
        "  dnf install rocm-gfx94X",
        "node 2: gfx1100, family gfx110X",
        "  apt install rocm-gfx110x",
        "  dnf install rocm-gfx110X",
    ]


def test_cpu_nodes_are_not_gpus(tmp_path):
    sysfs = fake_sysfs(tmp_path, [(CPU_PROPERTIES, "\n"), (CPU_PROPERTIES, "\n")])
    assert detect_gpus(str(sysfs)) == []
    result = run_detect(sysfs)
    assert result.returncode == 0
    assert "no AMD GPU found" in result.stdout


def test_a_machine_without_the_amdgpu_driver_has_no_topology(tmp_path):
    assert detect_gpus(str(tmp_path)) == []
    assert "no AMD GPU found" in run_detect(tmp_path).stdout


def test_the_library_reports_node_numbers_names_and_families(tmp_path):
    sysfs = fake_sysfs(tmp_path, [(CPU_PROPERTIES, "\n"), (gpu_properties(110001, 29823), "gfx1101\n"),
                                  (gpu_properties(120001, 30032), "gfx1201\n")])
    found = [(g.node, g.target, g.family, g.name, g.device_id) for g in detect_gpus(str(sysfs))]
    assert found == [(1, "gfx1101", "gfx110X", "gfx1101", 29823), (2, "gfx1201", "gfx120X", "gfx1201", 30032)]


def test_a_target_outside_every_family_is_named_not_guessed(tmp_path):
    # gfx600 (Southern Islands) is in no family of the target table (gfx940 now has its own)
    sysfs = fake_sysfs(tmp_path, [(gpu_properties(60000, 1), "gfx600\n")])
    result = run_detect(sysfs)
    assert "node 0: gfx600" in result.stdout
    assert "no package for it" in result.stdout
    assert "install" not in result.stdout


@pytest.mark.parametrize("value", [-163615, 91600, 90016, 1000000])
def test_a_gfx_target_version_no_gpu_reports_is_an_error_naming_the_file(tmp_path, value):
    sysfs = fake_sysfs(tmp_path, [(gpu_properties(value, 1), "gpu\n")])
    result = run_detect(sysfs)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "properties" in result.stderr and f"gfx_target_version {value}" in result.stderr
    assert "gfx-" not in result.stdout


def test_sysfs_text_that_is_not_utf8_is_read_not_a_traceback(tmp_path):
    sysfs = fake_sysfs(tmp_path, [(gpu_properties(90402, 1), "gpu\n")])
    node = sysfs / "class/kfd/kfd/topology/nodes/0"
    (node / "properties").write_bytes(b"name \xff\xfe\n" + gpu_properties(90402, 1).encode())
    (node / "name").write_bytes(b"\xff\x1b[2Jgpu\n")
    result = run_detect(sysfs)
    assert result.returncode == 0, result.stderr
    assert "node 0: gfx942" in result.stdout and "\x1b" not in result.stdout
