"""The sandbox's package mirror: apt repository, PEP 503 indexes, git repository.

Built once per session into a temporary directory (``sandbox_mirror`` fixture) and served by
``python3 -m http.server`` on a free loopback port (``mirror_url``).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import html.parser
import io
import json
import os
import subprocess
import sys
import urllib.parse
import zipfile
from pathlib import Path

import pytest
from sandbox_mirror import builder, catalog, gitrepo, testkit

REPO = Path(__file__).resolve().parents[1]
RELEASES = {r.dotted: r for r in catalog.CUDA_RELEASES}


def apt_dir(mirror) -> Path:
    return mirror.out / catalog.APT_REPO_PATH


def deb_field(deb: Path, name: str) -> str:
    return subprocess.run(
        ["dpkg-deb", "-f", str(deb), name], capture_output=True, text=True, check=True
    ).stdout.strip()


def deb_file(deb: Path, member: str) -> bytes:
    tar = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True)
    out = subprocess.run(["tar", "-xO", f".{member}"], input=tar.stdout, capture_output=True, check=True)
    return out.stdout


# -- apt repository ---------------------------------------------------------------------


def test_inrelease_verifies_with_the_exported_keyring(sandbox_mirror):
    repo = apt_dir(sandbox_mirror)
    keyring = repo / catalog.APT_KEYRING_NAME
    assert not keyring.read_bytes().startswith(b"-----BEGIN"), "signed-by wants a binary keyring"
    for args in (["InRelease"], ["Release.gpg", "Release"]):
        proc = subprocess.run(
            ["gpgv", "--keyring", str(keyring), *args], cwd=repo, capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stderr
        assert "Good signature" in proc.stderr


def test_release_lists_index_hashes(sandbox_mirror):
    repo = apt_dir(sandbox_mirror)
    release = (repo / "Release").read_text()
    sha256 = release.split("SHA256:\n", 1)[1].split("SHA512:", 1)[0]
    listed = {line.split()[2]: line.split()[0] for line in sha256.strip().splitlines()}
    assert set(listed) == {"Packages", "Packages.gz"}
    for name, digest in listed.items():
        assert hashlib.sha256((repo / name).read_bytes()).hexdigest() == digest
    assert "Origin: NVIDIA" in release


@pytest.mark.parametrize("release", catalog.CUDA_RELEASES, ids=lambda r: r.dotted)
def test_packages_names_versions_and_depends(sandbox_mirror, release):
    repo, d = apt_dir(sandbox_mirror), release.dashed
    toolkit = repo / f"cuda-toolkit-{d}_{release.toolkit}_amd64.deb"
    assert deb_field(toolkit, "Package") == f"cuda-toolkit-{d}"
    assert deb_field(toolkit, "Version") == release.toolkit
    assert deb_field(toolkit, "Architecture") == "amd64"
    depends = deb_field(toolkit, "Depends")
    assert f"cuda-nvcc-{d} (= {release.nvcc})" in depends
    assert f"cuda-cudart-{d} (= {release.cudart})" in depends
    assert f"cuda-toolkit-{d}-config-common (= {release.cudart})" in depends
    assert f"cuda-toolkit-{release.major}-config-common" in depends
    assert "cuda-toolkit-config-common" in depends
    cudart = repo / f"cuda-cudart-{d}_{release.cudart}_amd64.deb"
    assert deb_field(cudart, "Version") == release.cudart
    packages = (repo / "Packages").read_text()
    assert f"Package: cuda-nvcc-{d}\nVersion: {release.nvcc}\n" in packages


@pytest.mark.parametrize("release", catalog.CUDA_RELEASES, ids=lambda r: r.dotted)
def test_nvcc_prints_the_release_text(sandbox_mirror, release, tmp_path):
    deb = apt_dir(sandbox_mirror) / f"cuda-nvcc-{release.dashed}_{release.nvcc}_amd64.deb"
    nvcc = tmp_path / "nvcc"
    nvcc.write_bytes(deb_file(deb, f"/usr/local/cuda-{release.dotted}/bin/nvcc"))
    out = subprocess.run(["sh", str(nvcc), "--version"], capture_output=True, text=True)
    assert out.returncode == 0
    assert out.stdout.splitlines() == [
        "nvcc: NVIDIA (R) Cuda compiler driver",
        "Copyright (c) 2005-2025 NVIDIA Corporation",
        f"Built on {release.built_on}",
        f"Cuda compilation tools, release {release.dotted}, V{release.nvcc_upstream}",
        f"Build {release.build}",
    ]
    bad = subprocess.run(["sh", str(nvcc), "kernel.cu"], capture_output=True, text=True)
    assert bad.returncode == 1
    assert bad.stderr == ("nvcc fatal   : No input files specified; use option --help for more information\n")


def test_nvcc_text_of_13_0_is_the_real_one():
    text = RELEASES["13.0"].nvcc_version_text()
    assert "Built on Wed_Aug_20_01:58:59_PM_PDT_2025\n" in text
    assert "Cuda compilation tools, release 13.0, V13.0.88\n" in text
    assert text.endswith("Build cuda_13.0.r13.0/compiler.36424714_0\n")


@pytest.mark.parametrize("release", catalog.CUDA_RELEASES, ids=lambda r: r.dotted)
def test_config_common_registers_the_alternatives(sandbox_mirror, release, tmp_path):
    deb = apt_dir(sandbox_mirror) / f"cuda-toolkit-{release.dashed}-config-common_{release.cudart}_amd64.deb"
    subprocess.run(["dpkg-deb", "-e", str(deb), str(tmp_path / "DEBIAN")], check=True)
    postinst = (tmp_path / "DEBIAN" / "postinst").read_text()
    prerm = (tmp_path / "DEBIAN" / "prerm").read_text()
    prefix, prio = f"/usr/local/cuda-{release.dotted}", release.priority
    assert f"update-alternatives --install /usr/local/cuda cuda {prefix} {prio}\n" in postinst
    assert (
        f"update-alternatives --install /usr/local/cuda-{release.major} cuda-{release.major} "
        f"{prefix} {prio}\n"
    ) in postinst
    assert f"update-alternatives --remove cuda {prefix}\n" in prerm
    assert f"update-alternatives --remove cuda-{release.major} {prefix}\n" in prerm
    assert os.access(tmp_path / "DEBIAN" / "postinst", os.X_OK)
    assert [r.priority for r in catalog.CUDA_RELEASES] == [128, 130, 131]


def test_cudart_ships_libraries_links_and_version_json(sandbox_mirror):
    release = RELEASES["13.0"]
    deb = apt_dir(sandbox_mirror) / f"cuda-cudart-13-0_{release.cudart}_amd64.deb"
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    lib = "./usr/local/cuda-13.0/targets/x86_64-linux/lib"
    assert f"{lib}/libcudart.so.13 -> libcudart.so.13.0.96" in listing
    assert f"{lib}/libcudart.so -> libcudart.so.13" in listing
    assert "./usr/local/cuda-13.0/lib64 -> targets/x86_64-linux/lib" in listing
    version = json.loads(deb_file(deb, "/usr/local/cuda-13.0/version.json"))
    assert version["cuda"] == {"name": "CUDA SDK", "version": "13.0.2"}
    assert version["cuda_cudart"]["version"] == "13.0.96"
    conf = apt_dir(sandbox_mirror) / "cuda-toolkit-13-config-common_13.0.96-1_amd64.deb"
    assert (
        deb_file(conf, "/etc/ld.so.conf.d/988_cuda-13.conf")
        == b"/usr/local/cuda-13/targets/x86_64-linux/lib\n"
    )


# -- PEP 503 indexes and wheels -------------------------------------------------------


class _Anchors(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.anchors: list[dict[str, str | None]] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self.anchors.append(dict(attrs))


def anchors(page: Path) -> list[dict[str, str | None]]:
    parser = _Anchors()
    parser.feed(page.read_text())
    return parser.anchors


def test_every_index_link_resolves_with_its_sha256(sandbox_mirror):
    checked = 0
    for index in sandbox_mirror.manifest["indexes"]:
        root = sandbox_mirror.out / index
        projects = [a["href"] for a in anchors(root / "index.html")]
        assert projects, index
        for href in projects:
            page = root / href / "index.html"
            for a in anchors(page):
                url, _, fragment = a["href"].partition("#sha256=")
                target = (page.parent / urllib.parse.unquote(url)).resolve()
                assert target.is_file(), (index, a)
                assert hashlib.sha256(target.read_bytes()).hexdigest() == fragment
                checked += 1
    assert checked >= 40


def test_torch_links_declare_requires_python(sandbox_mirror):
    page = sandbox_mirror.out / "whl" / "cu130" / "torch" / "index.html"
    links = anchors(page)
    assert {a["data-requires-python"] for a in links} == {">=3.10"}
    assert "torch-2.9.1%2Bcu130-cp311-cp311-manylinux_2_28_x86_64.whl" in links[1]["href"]


def _wheel_metadata(path: Path) -> tuple[str, str, zipfile.ZipFile]:
    zf = zipfile.ZipFile(path)
    info = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA")).rsplit("/", 1)[0]
    return zf.read(f"{info}/METADATA").decode(), zf.read(f"{info}/WHEEL").decode(), zf


def _check_record(zf: zipfile.ZipFile) -> None:
    """RECORD lists every file of the wheel with its sha256 and size."""
    record_name = next(n for n in zf.namelist() if n.endswith("/RECORD"))
    rows = list(csv.reader(io.StringIO(zf.read(record_name).decode())))
    assert {r[0] for r in rows} == set(zf.namelist())
    for name, digest, size in rows:
        if name == record_name:
            continue
        data = zf.read(name)
        expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert digest == f"sha256={expected}" and int(size) == len(data), name


@pytest.mark.parametrize(
    ("relpath", "requires"),
    [
        (
            "whl/cu128/torch-2.9.1+cu128-cp311-cp311-manylinux_2_28_x86_64.whl",
            'nvidia-cuda-runtime-cu12==12.8.90; platform_system == "Linux" and platform_machine == "x86_64"',
        ),
        (
            "whl/cu130/torch-2.9.1+cu130-cp311-cp311-manylinux_2_28_x86_64.whl",
            'nvidia-cuda-runtime==13.0.96; platform_system == "Linux" and platform_machine == "x86_64"',
        ),
    ],
)
def test_torch_wheel_metadata_and_record(sandbox_mirror, relpath, requires):
    metadata, wheel, zf = _wheel_metadata(sandbox_mirror.out / relpath)
    version = relpath.split("/")[-1].split("-")[1]
    assert "Metadata-Version: 2.1\nName: torch\n" in metadata
    assert f"\nVersion: {version}\n" in metadata
    assert f"Requires-Dist: {requires}" in metadata
    assert "Root-Is-Purelib: false" in wheel
    assert "Tag: cp311-cp311-manylinux_2_28_x86_64" in wheel
    _check_record(zf)


def test_kernel_wheel_names_and_tags(sandbox_mirror):
    out = sandbox_mirror.out
    assert (out / "sgl-whl/cu130/sgl_kernel-0.3.21+cu130-cp310-abi3-manylinux2014_x86_64.whl").is_file()
    assert (
        out / "flashinfer-whl/cu130/flashinfer_jit_cache-0.6.3+cu130-cp39-abi3-manylinux_2_28_x86_64.whl"
    ).is_file()
    metadata, wheel, _ = _wheel_metadata(out / "pypi/packages/flashinfer_python-0.6.3-py3-none-any.whl")
    assert "Name: flashinfer-python\nVersion: 0.6.3\n" in metadata
    assert "Requires-Dist: torch\n" in metadata
    assert "Root-Is-Purelib: true" in wheel


def test_the_mixed_kernel_is_the_cu130_stand_in_plus_one_real_cuda_12_object(sandbox_mirror):
    out = sandbox_mirror.out
    name = "sgl_kernel-0.3.21+cu130-cp310-abi3-manylinux2014_x86_64.whl"
    assert sandbox_mirror.manifest["indexes"]["sgl-whl/cu130-mixed"] == [name]
    metadata, wheel, mixed = _wheel_metadata(out / "sgl-whl/cu130-mixed" / name)
    plain_metadata, plain_wheel, plain = _wheel_metadata(out / "sgl-whl/cu130" / name)
    _check_record(mixed)
    info = "sgl_kernel-0.3.21+cu130.dist-info"
    # Every file of the cu130 stand-in, the same bytes; METADATA differs only in its description.
    same = set(plain.namelist()) - {f"{info}/METADATA", f"{info}/RECORD"}
    assert set(mixed.namelist()) == set(plain.namelist()) | {"sgl_kernel/spatial_ops.abi3.so"}
    assert all(mixed.read(n) == plain.read(n) for n in same)
    assert wheel == plain_wheel
    head, _, description = metadata.partition("\n\n")
    assert head == plain_metadata.partition("\n\n")[0]
    obj = catalog.SPATIAL_OPS_CUDA_12
    for fact in (
        "Sandbox stand-in",
        "sgl-whl/cu130-mixed, which has no real counterpart",
        "sgl-project/sglang-omni#620",
        f"`{obj.path}` (sha256 {obj.sha256}) from `{obj.wheel}` (sha256 {obj.wheel_sha256})",
        "libnvrtc.so.12, libcuda.so.1, libcudart.so.12",
    ):
        assert fact in description, fact
    # The real object, its bytes as committed and as SOURCES.md records them.
    data = mixed.read(obj.path)
    assert data == (REPO / obj.source).read_bytes()
    assert hashlib.sha256(data).hexdigest() == obj.sha256
    sources = (REPO / "tests/fixtures/elf/SOURCES.md").read_text()
    row = next(
        line for line in sources.splitlines() if line.startswith(f"| `{obj.source.split('elf/', 1)[1]}`")
    )
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == f"`{obj.wheel}` (`{obj.wheel_sha256}`)"
    assert cells[2] == f"`{obj.path}`"
    assert cells[3] == f"`{obj.sha256}`"
    assert cells[4] == " ".join(obj.needed)


def test_the_real_object_is_an_input_of_the_stamp_and_a_changed_copy_is_refused(monkeypatch, tmp_path):
    from sandbox_mirror import standins

    obj = catalog.SPATIAL_OPS_CUDA_12
    sources = standins.real_object_sources()
    assert list(sources) == [obj.source]
    before = builder.compute_stamp("F", [])
    monkeypatch.setattr(standins, "real_object_sources", lambda: {obj.source: sources[obj.source] + b"\0"})
    assert builder.compute_stamp("F", []) != before
    # A copy whose bytes are not the recorded ones is refused, not built into the wheel.
    (tmp_path / obj.source).parent.mkdir(parents=True)
    (tmp_path / obj.source).write_bytes(sources[obj.source] + b"\0")
    monkeypatch.setattr(standins, "REPO_ROOT", tmp_path)
    with pytest.raises(
        ValueError, match=rf"spatial_ops\.abi3\.so: sha256 [0-9a-f]{{64}}, recorded {obj.sha256}"
    ):
        standins.real_object_bytes(obj)


# -- installs into a venv ---------------------------------------------------------------


def _probe(venv: testkit.StackVenv, no_ld_conf: Path) -> dict:
    code = (
        "import json, importlib.metadata as m, torch, sgl_kernel, flashinfer\n"
        "print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda,\n"
        " 'available': torch.cuda.is_available(), 'arch': torch.cuda.get_arch_list(),\n"
        " 'dists': {d: m.version(d) for d in ('torch', 'sgl-kernel', 'flashinfer-python',\n"
        "  'flashinfer-cubin', 'flashinfer-jit-cache')}}))\n"
    )
    env = testkit.clean_env(CUDA_HOME=str(venv.cuda_home), SANDBOX_LD_SO_CONF_D=str(no_ld_conf))
    return json.loads(testkit.run([str(venv.python), "-c", code], env).stdout)


def test_cu130_stack_installs_from_the_mirror(venv_cu130, no_ld_conf):
    probe = _probe(venv_cu130, no_ld_conf)
    assert probe["torch"] == "2.9.1+cu130"
    assert probe["cuda"] == "13.0"
    assert probe["available"] is False and probe["arch"] == []
    assert probe["dists"] == {
        "torch": "2.9.1+cu130",
        "sgl-kernel": "0.3.21+cu130",
        "flashinfer-python": "0.6.3",
        "flashinfer-cubin": "0.6.3",
        "flashinfer-jit-cache": "0.6.3+cu130",
    }
    show = testkit.run([str(venv_cu130.python), "-m", "pip", "show", "torch"], testkit.clean_env())
    assert "Version: 2.9.1+cu130" in show.stdout
    assert "nvidia-cuda-runtime" in show.stdout


def test_cu128_stack_installs_from_the_mirror(venv_cu128, no_ld_conf):
    probe = _probe(venv_cu128, no_ld_conf)
    assert (probe["torch"], probe["cuda"]) == ("2.9.1+cu128", "12.8")
    assert probe["dists"]["sgl-kernel"] == "0.3.21+cu128"
    assert probe["dists"]["flashinfer-jit-cache"] == "0.6.1+cu128"


def test_torch_pretends_gpus_on_request(venv_cu128, no_ld_conf):
    code = "import torch; print(torch.cuda.get_arch_list(), torch.cuda.get_device_capability(), torch.cuda.device_count())"
    env = testkit.clean_env(SANDBOX_TORCH_CUDA_AVAILABLE="1", SANDBOX_LD_SO_CONF_D=str(no_ld_conf))
    out = testkit.run([str(venv_cu128.python), "-c", code], env).stdout.strip()
    assert out == "['sm_70', 'sm_75', 'sm_80', 'sm_86', 'sm_90', 'sm_100', 'sm_120'] (12, 0) 8"


def test_torch_without_its_runtime_wheel_fails_like_the_real_one(mirror_url, tmp_path, no_ld_conf):
    target = tmp_path / "t"
    testkit.pip(
        Path(sys.executable),
        "--no-deps",
        "--target",
        str(target),
        "--index-url",
        f"{mirror_url}/whl/cu130",
        "torch==2.9.1+cu130",
    )
    env = testkit.clean_env(PYTHONPATH=str(target), SANDBOX_LD_SO_CONF_D=str(no_ld_conf))
    proc = subprocess.run([sys.executable, "-c", "import torch"], env=env, capture_output=True, text=True)
    assert proc.returncode != 0
    assert proc.stderr.strip().endswith(
        "OSError: libcudart.so.13: cannot open shared object file: No such file or directory"
    )


def test_sglang_release_wheel_installs_beside_the_cu130_stack(mirror_url, toolkits, tmp_path, no_ld_conf):
    """The release wheel (sglang_build_method: wheel): from pypi/simple, beside the cu130 stack,
    none of which it replaces; it imports as the real one does (module sglang, its version) and
    its server's stack check passes, with no build record (the real wheel is pure Python)."""
    python = testkit.make_venv(tmp_path / "venv")
    testkit.install_stack(python, mirror_url, "cu130")
    freeze = [str(python), "-m", "pip", "--isolated", "freeze", "--all"]
    before = testkit.run(freeze, testkit.clean_env()).stdout.splitlines()
    testkit.pip(python, *testkit.index_args(mirror_url, "cu130"), "sglang==0.5.9")
    after = testkit.run(freeze, testkit.clean_env()).stdout.splitlines()
    assert sorted(set(after) - set(before)) == ["sglang==0.5.9"]
    assert set(before) <= set(after)
    code = (
        "import json, importlib.metadata as m, sglang\n"
        "from sglang.srt.stack import check_stack, read_build_info\n"
        "print(json.dumps({'version': sglang.__version__, 'file': sglang.__file__,\n"
        " 'dist': m.version('sglang'), 'build_info': read_build_info(),\n"
        " 'stack': check_stack()['sglang_cudart']}))\n"
    )
    env = testkit.clean_env(CUDA_HOME=str(toolkits["13.0"]), SANDBOX_LD_SO_CONF_D=str(no_ld_conf))
    probe = json.loads(testkit.run([str(python), "-c", code], env, cwd=tmp_path).stdout)
    assert probe["version"] == probe["dist"] == "0.5.9"
    assert (
        probe["file"].startswith(str(tmp_path / "venv" / "lib")) and "site-packages/sglang/" in probe["file"]
    )
    assert probe["build_info"] == {} and probe["stack"] is None
    show = testkit.run([str(python), "-m", "pip", "show", "sglang"], testkit.clean_env()).stdout
    assert "Editable project location" not in show


# -- git repository ---------------------------------------------------------------------


def test_sglang_repo_clones_over_dumb_http(sandbox_mirror, mirror_url, tmp_path):
    tags = sandbox_mirror.manifest["git"]["sglang"]["tags"]
    remote = testkit.run(["git", "ls-remote", f"{mirror_url}/git/sglang.git"], testkit.clean_env()).stdout
    assert f"{tags['v0.5.8']}\trefs/tags/v0.5.8^{{}}" in remote
    assert f"{tags['v0.5.9']}\trefs/heads/main" in remote
    clone = testkit.clone_sglang(mirror_url, "v0.5.8", tmp_path / "sglang")
    pyproject = (clone / "python" / "pyproject.toml").read_text()
    assert 'name = "sglang"' in pyproject and 'version = "0.5.8"' in pyproject
    for dep in ('"sgl-kernel==0.3.21"', '"flashinfer_python==0.6.1"', '"torch==2.9.1"'):
        assert dep in pyproject
    assert (clone / "python" / "setup.py").is_file()


def test_sglang_commit_ids_are_stable(sandbox_mirror, tmp_path):
    tags = gitrepo.build_sglang_repo(builder.SGLANG_SRC, tmp_path / "again.git")
    assert tags == sandbox_mirror.manifest["git"]["sglang"]["tags"]


# -- incremental rebuild ----------------------------------------------------------------


def test_rebuild_with_unchanged_inputs_changes_nothing(sandbox_mirror):
    out = sandbox_mirror.out
    watched = [
        out / builder.STAMP_NAME,
        apt_dir(sandbox_mirror) / "InRelease",
        out / "manifest.json",
    ]
    before = [(p.stat().st_mtime_ns, p.read_bytes()) for p in watched]
    gnupg = out.parent / "gnupg"
    again = builder.build_mirror(out, gnupg)
    assert again.rebuilt is False and again.stamp == sandbox_mirror.stamp
    assert [(p.stat().st_mtime_ns, p.read_bytes()) for p in watched] == before
    cli = testkit.run(
        [
            sys.executable,
            str(REPO / "sandbox/mirror/build.py"),
            "--out",
            str(out),
            "--gnupg-home",
            str(gnupg),
        ],
        testkit.clean_env(),
    )
    assert "up to date" in cli.stdout
    assert [(p.stat().st_mtime_ns, p.read_bytes()) for p in watched] == before
