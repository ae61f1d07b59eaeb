#!/usr/bin/env python3
"""Describe the Python stack of the interpreter that runs this script.

Runs on the managed host, with the venv's own interpreter (``<venv>/bin/python
stack_probe.py [MODULE ...]``), standard library only. The modules to import
default to torch, sgl_kernel, flashinfer and sglang. Prints one JSON object::

    {"python": "3.11.2", "prefix": "/opt/ml-env-cu130",
     "dists": {"torch": "2.14.1", ...},        # normalized name -> version (first on sys.path)
     "shadowed": {"sglang-kernel": ["0.4.10"]}, # later copies of a distribution on sys.path
     "requires": {"sglang-kernel": ["torch==2.14.1", ...], ...},   # Requires-Dist
     "needed": {"sglang-kernel": ["libcuda.so.1", "libcudart.so.13", ...], ...},
     "objects": {"torch-memory-saver": {                  # every distribution with such objects
         "torch_memory_saver_hook_mode_preload_cu12.abi3.so":
             {"needed": ["libcuda.so.1", "libcudart.so.12"], "mapped": false}, ...}, ...},
     "libraries": {"libcudart.so.13": {"venv": ["nvidia/cu13/lib/libcudart.so.13"],
                                       "system": null | "/usr/local/cuda-13.0/lib/libcudart.so.13"}, ...},
     "marker_environment": {...},               # PEP 508 marker values of this interpreter
     "torch": {"version": "2.14.1+cu130", "cuda": "13.0", "cuda_available": false,
               "device_count": 0, "cuda_warning": null | "CUDA initialization: ...",
               "arch_list": ["sm_75", ...] | null,
               "arch_list_error": null | "RuntimeError: ..."} | null,
     "imports": {"torch": null, "sgl_kernel": "Traceback ...ImportError: ..."},
     "driver_library": null | "libcuda.so.1: cannot open shared object file: ...",
     "pip_check": {"rc": 0, "output": "No broken requirements found."},
     "overlaps": [{"path": "nvidia_cutlass_dsl/lib/libcute_dsl_runtime.so",
                   "owners": [{"name": "nvidia-cutlass-dsl-libs-base", "version": "4.5.0",
                               "hash": "sha256=..."}, ...],
                   "on_disk": "nvidia-cutlass-dsl-libs-cu13" | null}, ...],
     "libcuda": [{"path": "/opt/ml-env-cu130/lib/python3.11/site-packages/x/libcuda.so.1",
                  "target": "/opt/ml-env-cu130/lib/python3.11/site-packages/x/libcuda.so.580.65.06",
                  "version": "580.65.06" | null, "where": "venv" | "sys.path" | "LD_LIBRARY_PATH" |
                  "LD_LIBRARY_PATH of sglang.service" | "library_path" | "/etc/ld.so.conf.d/x.conf",
                  "owner": "sandbox-compat-libcuda-standin" | null}, ...]}

``imports`` maps each module to ``null`` when it imports, or the whole
traceback text (exception chain included) when it does not. ``needed`` lists,
for each CUDA-carrying distribution, the union of the ELF ``DT_NEEDED``
entries of the shared objects it installed (read from the files' dynamic
sections; System V ABI, "Dynamic Section"). ``objects`` is per shared object
and covers every distribution on ``sys.path``: for each object (its path
relative to the distribution's location, site-packages, as in its RECORD) that
needs at least one CUDA library (:func:`cuda_libraries`), those ``NEEDED``
entries, and ``mapped``: whether the object is mapped into this process after
the modules' imports (``/proc/self/maps``, proc(5)), null where that file
cannot be read. ``libraries`` says, for each CUDA library that an object of
``objects`` needs, where the loader can find it: ``venv``, the files of that
name that the venv's distributions installed (``nvidia/cu13/lib/libcudart.so.13``),
and ``system``, the path the loader's cache gives it (``ldconfig -p``, symlinks
resolved), null when it has none or ldconfig cannot run. ``driver_library`` is null when
``libcuda.so.1`` (the NVIDIA driver's CUDA library) loads, else the loader's
error.

``overlaps`` lists each file that two or more distributions' ``RECORD`` files claim
(the same path, resolved against each distribution's location) with different
hashes: pip does not detect such files and the distribution installed last wins
(sgl-project/sglang PR #25938, NVIDIA/cutlass#3170). The same hash is harmless and
left out, and so are ``RECORD`` entries without a hash (``RECORD`` itself, ``.pyc``
files); ``on_disk`` names the owner whose hash the file on disk has. ``libcuda`` lists
every file named ``libcuda.so*`` (the NVIDIA driver's CUDA library) that the stack's
loader could be given instead of the driver's own: anywhere under ``sys.prefix`` when
it is a venv, each one a distribution's ``RECORD`` names, each one in a directory of
``LD_LIBRARY_PATH`` (this process's, the service's when the module is given
``service``, and ``library_path``), and each one in a directory that ``/etc/ld.so.conf``
names (with its ``include`` files, and ``/etc/ld.so.conf.d/*.conf``); a
forward-compatibility library (``/usr/local/cuda-X.Y/compat``, NVIDIA's cuda-compat
package) is found wherever one of those names it. ``version`` is read from the file
name (``libcuda.so.580.65.06``), else from the name of the file it links to, else,
for a plain file ``libcuda.so.1``, from the one ``libcuda.so.<version>`` beside it.
Which of them matter is the verdict's (``cuda13_upgrade.stack.stack_verdict``).

Exit status 0 whenever the probe itself ran; the caller decides what the findings mean.
"""

from __future__ import annotations

import base64
import ctypes
import glob
import hashlib
import importlib
import importlib.metadata
import json
import os
import platform
import re
import struct
import subprocess
import sys
import traceback
import warnings

MODULES = ("torch", "sgl_kernel", "flashinfer", "sglang")
#: Distributions whose shared objects are read (the CUDA-carrying part of the stack).
CUDA_DISTRIBUTIONS = (
    "torch",
    "sgl-kernel",
    "sglang-kernel",
    "flashinfer-python",
    "flashinfer-cubin",
    "flashinfer-jit-cache",
)
#: File names of shared objects: ``x.so``, ``libcudart.so.13``, ``libnvrtc-builtins.so.13.0``.
SHARED_OBJECT = re.compile(r"\.so(\.\d+)*$")
#: CUDA libraries, by soname: the driver's (libcuda, libnvidia-ml), the CUDA
#: toolkit's (cudart, cuBLAS/cuBLASLt/nvblas, cuFFT, cuRAND, cuSOLVER,
#: cuSPARSE, NVRTC, nvJitLink, CUPTI and its nvperf libraries, NPP, nvJPEG,
#: cuFile, NVTX, NVVM) and NVIDIA's libraries that come as nvidia-* wheels
#: beside them (cuDNN, NCCL, cuSPARSELt, NVSHMEM). Which of their soname
#: majors is the CUDA major is decided by the verdict
#: (``cuda13_upgrade.wheels.cuda_majors_of_needed``), not here.
_CUDA_LIBRARY = re.compile(
    r"^lib(?:cuda|nvidia-ml|cudart|cublas|cublasLt|nvblas|cufftw?|curand|cusolver(?:Mg)?"
    r"|cusparse(?:Lt)?|nvrtc(?:-builtins)?|nvJitLink|cupti|nvperf_(?:host|target)|npp\w*|nvjpeg"
    r"|cufile(?:_rdma)?|nvToolsExt|nvtx3interop|nvvm|cudnn\w*|nccl|nvshmem_host)\.so(?:\.\d+)*$"
)
#: The NVIDIA driver's CUDA library: ``libcuda.so`` (the linker's name, and the toolkit's
#: stub), ``libcuda.so.1`` (its soname, what the CUDA runtime and torch load) and
#: ``libcuda.so.580.65.06`` (the file itself, named after the driver that ships it).
LIBCUDA = re.compile(r"^libcuda\.so(?:\.\d+)*$")
_LIBCUDA_VERSION = re.compile(r"^libcuda\.so\.(\d+\.\d+(?:\.\d+)?)$")
_PT_LOAD, _PT_DYNAMIC = 1, 2
_DT_NULL, _DT_NEEDED, _DT_STRTAB = 0, 1, 5


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def elf_needed(path: str) -> list[str]:
    """The ``DT_NEEDED`` entries of an ELF file, in order; [] when it is not ELF.

    Reads the program headers, the ``PT_DYNAMIC`` segment and the string table
    it points to (mapped to a file offset through the ``PT_LOAD`` segments).
    """
    with open(path, "rb") as f:
        ident = f.read(16)
        if len(ident) < 16 or ident[:4] != b"\x7fELF":
            return []
        is64, endian = ident[4] == 2, "<" if ident[5] == 1 else ">"
        if is64:
            f.seek(32)
            (phoff,) = struct.unpack(endian + "Q", f.read(8))
            f.seek(54)
            phentsize, phnum = struct.unpack(endian + "HH", f.read(4))
        else:
            f.seek(28)
            (phoff,) = struct.unpack(endian + "I", f.read(4))
            f.seek(42)
            phentsize, phnum = struct.unpack(endian + "HH", f.read(4))
        loads, dynamic = [], None
        for i in range(phnum):
            f.seek(phoff + i * phentsize)
            raw = f.read(phentsize)
            if is64:
                p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz = struct.unpack(
                    endian + "IIQQQQ", raw[:40]
                )
            else:
                p_type, p_offset, p_vaddr, _paddr, p_filesz = struct.unpack(endian + "IIIII", raw[:20])
            if p_type == _PT_LOAD:
                loads.append((p_vaddr, p_offset, p_filesz))
            elif p_type == _PT_DYNAMIC:
                dynamic = (p_offset, p_filesz)
        if dynamic is None:
            return []
        f.seek(dynamic[0])
        data = f.read(dynamic[1])
        entry, fmt = (16, endian + "qQ") if is64 else (8, endian + "iI")
        needed_offsets, strtab = [], None
        for pos in range(0, len(data) - entry + 1, entry):
            tag, value = struct.unpack(fmt, data[pos : pos + entry])
            if tag == _DT_NULL:
                break
            if tag == _DT_NEEDED:
                needed_offsets.append(value)
            elif tag == _DT_STRTAB:
                strtab = value
        if strtab is None:
            return []
        for vaddr, offset, filesz in loads:
            if vaddr <= strtab < vaddr + filesz:
                strtab = strtab - vaddr + offset
                break
        names = []
        for off in needed_offsets:
            f.seek(strtab + off)
            raw = f.read(256)
            names.append(raw.split(b"\0", 1)[0].decode("utf-8", "replace"))
        return names


def cuda_libraries(needed) -> list[str]:
    """The entries of ``needed`` (``DT_NEEDED`` sonames) that name a CUDA library.

    ``cuda_libraries(["libtorch.so", "libcuda.so.1", "libcudart.so.12", "libc.so.6"])
    == ["libcuda.so.1", "libcudart.so.12"]``; order kept.
    """
    return [name for name in needed if _CUDA_LIBRARY.match(name)]


def mapped_files(maps: str = "/proc/self/maps") -> set[str] | None:
    """The files mapped into this process: the path column of ``/proc/self/maps``
    (proc(5): ``address perms offset dev inode pathname``), as the kernel prints
    them (symlinks resolved, `` (deleted)`` dropped). None when the file cannot
    be read (not Linux)."""
    try:
        with open(maps, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    found = set()
    for line in lines:
        fields = line.split(None, 5)
        if len(fields) == 6 and fields[5].startswith("/"):
            found.add(fields[5].removesuffix(" (deleted)"))
    return found


def _objects(dist, mapped: set[str] | None) -> dict[str, dict]:
    # Each shared object of the distribution that needs a CUDA library.
    found: dict[str, dict] = {}
    for file in dist.files or ():
        if not SHARED_OBJECT.search(file.name):
            continue
        path = str(file.locate())
        try:
            libs = cuda_libraries(elf_needed(path))
        except (OSError, struct.error):
            continue
        if libs:
            found[file.as_posix()] = {
                "needed": libs,
                "mapped": None if mapped is None else os.path.realpath(path) in mapped,
            }
    return found


def loader_cache(text: str) -> dict[str, str]:
    """``{soname: path}`` from ``ldconfig -p`` output (the dynamic loader's cache,
    ``/etc/ld.so.cache``; ldconfig(8)): lines ``\tlibcudart.so.13 (libc6,x86-64)
    => /usr/local/cuda-13.0/lib/libcudart.so.13``, the first path of each soname
    (the cache lists them in the order the loader tries them)."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        soname, sep, path = line.strip().partition(" => ")
        if sep and path:
            found.setdefault(soname.split(" (", 1)[0], path.strip())
    return found


def _ldconfig() -> dict[str, str] | None:
    for tool in ("ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"):
        try:
            done = subprocess.run([tool, "-p"], capture_output=True, text=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0:
            return loader_cache(done.stdout)
    return None


def _libraries(dists: dict, objects: dict[str, dict[str, dict]]) -> dict[str, dict]:
    # Where each CUDA library that an object needs can come from: files of that
    # name in the venv's distributions, and the loader's cache (symlinks resolved).
    names = sorted(
        {lib for files in objects.values() for record in files.values() for lib in record["needed"]}
    )
    venv: dict[str, list[str]] = {name: [] for name in names}
    for dist in dists.values():
        for file in dist.files or ():
            if file.name in venv:
                venv[file.name].append(file.as_posix())
    cache = _ldconfig()
    found = {}
    for name in names:
        system = None if cache is None else cache.get(name)
        found[name] = {"venv": sorted(venv[name]), "system": system and os.path.realpath(system)}
    return found


def _file_hash(path: str, mode: str) -> str | None:
    # A file's hash as RECORD writes it: "<mode>=<urlsafe base64 of the digest, no padding>".
    try:
        digest = hashlib.new(mode)
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except (OSError, ValueError):
        return None
    return f"{mode}=" + base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode("ascii")


def scan_records(dists, prefix: str | None = None) -> tuple[list[dict], dict[str, str]]:
    """One pass over the ``RECORD`` of each distribution in ``dists``.

    ``dists``: ``importlib.metadata`` distributions (every one on ``sys.path``, shadowed
    copies included). ``RECORD`` rows are ``path,<mode>=<urlsafe base64 digest>,size``
    (the "Recording installed projects" specification, PEP 376/627); each path is resolved
    against its distribution's location (``os.path.normpath``, no file system access) and
    kept in one dict, so a real stack (some 200 distributions, 70,000 files) costs one
    read of each ``RECORD``. Rows without a hash (``RECORD`` itself, ``.pyc``) are left out.

    Returns ``(overlaps, libcuda_owners)``: ``overlaps``, sorted by path, the paths claimed
    by two or more distributions with different hashes, ``{"path", "owners": [{"name",
    "version", "hash"}] (by name), "on_disk": the name of the owner whose hash the file
    on disk has, or None}``, ``path`` relative to the first owner's location (to
    ``prefix``, default ``sys.prefix``, when it lies outside it); only these files are read.
    ``libcuda_owners``: ``{absolute path: distribution name}`` of every recorded file named
    ``libcuda.so*``.
    """
    prefix = os.path.normpath(prefix or sys.prefix)
    claims: dict[str, list[tuple[str, str, str, str]]] = {}
    libcuda_owners: dict[str, str] = {}
    for dist in dists:
        files = dist.files
        metadata = dist.metadata
        name, version = _normalize(metadata.get("Name") or ""), metadata.get("Version") or ""
        if not files or not name:
            continue
        base = os.path.normpath(str(dist.locate_file("")))
        for file in files:
            if LIBCUDA.match(file.name):
                libcuda_owners.setdefault(os.path.normpath(os.path.join(base, str(file))), name)
            digest = file.hash
            if digest is None:
                continue
            key = os.path.normpath(os.path.join(base, str(file)))
            owner = (name, version, f"{digest.mode}={digest.value}", base)
            found = claims.get(key)
            if found is None:
                claims[key] = [owner]
            elif owner not in found:
                found.append(owner)
    overlaps = []
    for key, owners in claims.items():
        if len(owners) < 2 or len({o[2] for o in owners}) < 2:
            continue
        base = owners[0][3]
        if key.startswith(base + os.sep):
            path = key[len(base) + 1 :]
        elif key.startswith(prefix + os.sep):
            path = key[len(prefix) + 1 :]
        else:
            path = key
        on_disk = None
        for mode in dict.fromkeys(o[2].split("=", 1)[0] for o in owners):
            actual = _file_hash(key, mode)
            on_disk = next((o[0] for o in owners if o[2] == actual), None) if actual else None
            if on_disk:
                break
        overlaps.append(
            {
                "path": path,
                "owners": [{"name": o[0], "version": o[1], "hash": o[2]} for o in sorted(owners)],
                "on_disk": on_disk,
            }
        )
    return sorted(overlaps, key=lambda o: o["path"]), libcuda_owners


def _rooted(root: str, path: str) -> str:
    return path if root in ("", "/") else os.path.join(root, path.lstrip("/"))


def _unrooted(root: str, path: str) -> str:
    if root in ("", "/"):
        return path
    base = os.path.normpath(root)
    return "/" + path[len(base) :].lstrip("/") if path.startswith(base + os.sep) else path


def ld_so_conf_dirs(root: str = "/") -> list[tuple[str, str]]:
    """The directories the dynamic loader's configuration names, in order, each with the
    file that names it: ``/etc/ld.so.conf`` and the files its ``include`` lines name (glob
    patterns; a relative one against the including file's directory), then each
    ``/etc/ld.so.conf.d/*.conf`` not read already. Read as ldconfig(8) reads them (glibc
    ``elf/ldconfig.c``, ``parse_conf``): ``#`` starts a comment, ``include`` takes
    patterns separated by blanks, ``hwcap`` lines are ignored, every other line is one
    directory (trailing ``/`` dropped). ``root``: where ``/`` is (tests); the paths
    returned are the host's. Files that cannot be read are skipped.
    """
    found: list[tuple[str, str]] = []
    read: set[str] = set()

    def parse(conf: str) -> None:
        if conf in read:
            return
        read.add(conf)
        try:
            with open(_rooted(root, conf), encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            return
        for raw in lines:
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            if line.startswith("include") and line[7:8] in (" ", "\t"):
                for pattern in line[8:].split():
                    if not pattern.startswith("/"):
                        pattern = os.path.join(os.path.dirname(conf), pattern)
                    for match in sorted(glob.glob(_rooted(root, pattern))):
                        parse(_unrooted(root, match))
            elif line[:5].lower() == "hwcap" and line[5:6] in (" ", "\t"):
                continue
            else:
                directory = line.rstrip("/") or "/"
                if directory not in (d for d, _ in found):
                    found.append((directory, conf))

    parse("/etc/ld.so.conf")
    for conf in sorted(glob.glob(_rooted(root, "/etc/ld.so.conf.d/*.conf"))):
        parse(_unrooted(root, conf))
    return found


def service_library_path(service: str) -> list[str]:
    """The ``LD_LIBRARY_PATH`` directories systemd unit ``service`` runs with: its main
    process's (``/proc/<MainPID>/environ``, proc(5): what ``Environment=`` and
    ``EnvironmentFile=`` set) while it runs, else its ``Environment=`` as ``systemctl show
    -p Environment`` prints it (space-separated; an entry holding a space is
    ``[unprintable]``: systemd's bus-print-properties.c). [] when it sets none or neither
    can be read."""
    try:
        done = subprocess.run(
            ["systemctl", "show", "-p", "MainPID", "-p", "Environment", service],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    fields = dict(line.partition("=")[::2] for line in done.stdout.splitlines() if "=" in line)
    value = None
    pid = fields.get("MainPID", "0").strip()
    if pid.isdigit() and int(pid) > 0:
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                entries = f.read().decode("utf-8", "replace").split("\0")
            value = next((e.split("=", 1)[1] for e in entries if e.startswith("LD_LIBRARY_PATH=")), "")
        except OSError:
            value = None
    if value is None:
        entries = fields.get("Environment", "").split(" ")
        value = next((e.split("=", 1)[1] for e in entries if e.startswith("LD_LIBRARY_PATH=")), "")
    return [d for d in value.split(":") if d]


def _libcuda_version(path: str) -> str | None:
    name = os.path.basename(path)
    found = _LIBCUDA_VERSION.match(name) or _LIBCUDA_VERSION.match(os.path.basename(os.path.realpath(path)))
    if found:
        return found.group(1)
    if name == "libcuda.so.1" and not os.path.islink(path):
        try:
            beside = [m for m in map(_LIBCUDA_VERSION.match, os.listdir(os.path.dirname(path))) if m]
        except OSError:
            beside = []
        if len(beside) == 1:
            return beside[0].group(1)
    return None


def libcuda_files(
    prefix: str | None,
    library_dirs,
    *,
    root: str = "/",
    owners: dict[str, str] | None = None,
) -> list[dict]:
    """Every file named ``libcuda.so*`` under ``prefix`` (the venv; None: not searched), each
    one a distribution installed (``owners``: ``{path: distribution}``) and each in one of
    ``library_dirs`` (``[(directory, where)]``: ``where`` says who put the directory on the
    loader's path, ``"LD_LIBRARY_PATH"`` or ``"/etc/ld.so.conf.d/x.conf"``), each once, the
    venv's first.

    Returns ``[{"path", "target": the file it resolves to (symlinks followed), "version":
    "580.65.06" or None, "where": "venv", "sys.path" (a distribution's, outside ``prefix``)
    or the directory's ``where``, "owner": the distribution whose RECORD names it or
    None}]``. ``root``: where ``/`` is (tests); the paths returned are the host's.
    """
    owners = owners or {}
    found: list[dict] = []
    seen: set[str] = set()

    def add(path: str, where: str) -> None:
        if path in seen:
            return
        seen.add(path)
        real = _rooted(root, path)
        found.append(
            {
                "path": path,
                "target": _unrooted(root, os.path.realpath(real)),
                "version": _libcuda_version(real),
                "where": where,
                "owner": owners.get(path),
            }
        )

    if prefix:
        for dirpath, _dirs, filenames in os.walk(_rooted(root, prefix)):
            for name in sorted(filenames):
                if LIBCUDA.match(name):
                    add(_unrooted(root, os.path.join(dirpath, name)), "venv")
    for path in sorted(owners):
        if os.path.lexists(_rooted(root, path)):
            add(path, "sys.path")
    for directory, where in library_dirs:
        try:
            names = sorted(os.listdir(_rooted(root, directory)))
        except OSError:
            continue
        for name in names:
            if LIBCUDA.match(name):
                add(os.path.join(directory, name), where)
    return found


def _library_dirs(service: str, library_path) -> list[tuple[str, str]]:
    # The directories on the new stack's loader path, with who put each there.
    dirs = [(d, "LD_LIBRARY_PATH") for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    if service:
        dirs += [(d, f"LD_LIBRARY_PATH of {service}") for d in service_library_path(service)]
    dirs += [(d, "library_path") for d in library_path or () if d]
    return dirs + ld_so_conf_dirs()


def _marker_environment() -> dict[str, str]:
    # The values of PEP 508's environment markers, as packaging.markers computes them.
    impl = sys.implementation
    version = f"{impl.version.major}.{impl.version.minor}.{impl.version.micro}"
    if impl.version.releaselevel != "final":
        version += impl.version.releaselevel[0] + str(impl.version.serial)
    return {
        "implementation_name": impl.name,
        "implementation_version": version,
        "os_name": os.name,
        "platform_machine": platform.machine(),
        "platform_release": platform.release(),
        "platform_system": platform.system(),
        "platform_version": platform.version(),
        "python_full_version": platform.python_version(),
        "platform_python_implementation": platform.python_implementation(),
        "python_version": ".".join(platform.python_version_tuple()[:2]),
        "sys_platform": sys.platform,
    }


def _distributions():
    dists, shadowed = {}, {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata.get("Name")
        if not name:
            continue
        key = _normalize(name)
        if key in dists:
            shadowed.setdefault(key, []).append(dist.version)
            continue
        dists[key] = dist
    return dists, shadowed


def _needed(dist) -> list[str]:
    found: set[str] = set()
    for file in dist.files or ():
        if not SHARED_OBJECT.search(file.name):
            continue
        path = str(file.locate())
        try:
            found.update(elf_needed(path))
        except (OSError, struct.error):
            continue
    return sorted(found)


def _torch_info() -> dict:
    torch = sys.modules["torch"]
    cuda = getattr(torch, "cuda", None)
    # torch says why it cannot reach the GPUs only in a warning ("CUDA
    # initialization: The NVIDIA driver on your system is too old ...").
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        available = bool(cuda and cuda.is_available())
    arch_list, arch_error = None, None
    try:
        arch_list = list(cuda.get_arch_list()) if cuda else None
    except Exception:  # noqa: BLE001 - the text is what is reported
        arch_error = traceback.format_exc().strip().splitlines()[-1]
    return {
        "version": str(torch.__version__),
        "cuda": getattr(getattr(torch, "version", None), "cuda", None),
        "cuda_available": available,
        "device_count": int(cuda.device_count()) if available else 0,
        "cuda_warning": "\n".join(str(w.message) for w in caught) or None,
        "arch_list": arch_list,
        "arch_list_error": arch_error,
    }


def _driver_library() -> str | None:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return str(exc)
    return None


def _pip_check() -> dict:
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "check", "--disable-pip-version-check"],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"rc": None, "output": str(exc)}
    return {"rc": done.returncode, "output": (done.stdout + done.stderr).strip()}


def probe(modules=MODULES, *, service: str = "", library_path=()) -> dict:
    """What the Python running this reads of its stack (see the module docstring), after
    importing each of ``modules``. ``service``: the systemd unit whose ``LD_LIBRARY_PATH``
    the new stack will run with (:func:`service_library_path`); ``library_path``: more
    directories on that loader path."""
    dists, shadowed = _distributions()
    overlaps, libcuda_owners = scan_records(importlib.metadata.distributions())
    in_venv = sys.prefix != getattr(sys, "base_prefix", sys.prefix)
    imports: dict[str, str | None] = {}
    for module in modules or MODULES:
        try:
            importlib.import_module(module)
            imports[module] = None
        except BaseException:  # noqa: BLE001 - a failed import may exit; the text is reported
            imports[module] = traceback.format_exc().strip()
    mapped = mapped_files()
    objects = {k: _objects(dists[k], mapped) for k in sorted(dists)}
    return {
        "python": platform.python_version(),
        "prefix": sys.prefix,
        "dists": {k: dists[k].version for k in sorted(dists)},
        "shadowed": shadowed,
        "requires": {k: list(dists[k].requires or []) for k in CUDA_DISTRIBUTIONS if k in dists},
        "needed": {k: _needed(dists[k]) for k in CUDA_DISTRIBUTIONS if k in dists},
        "objects": {k: v for k, v in objects.items() if v},
        "libraries": _libraries(dists, objects),
        "marker_environment": _marker_environment(),
        "torch": _torch_info() if imports.get("torch", "absent") is None else None,
        "imports": imports,
        "driver_library": _driver_library(),
        "pip_check": _pip_check(),
        "overlaps": overlaps,
        "libcuda": libcuda_files(
            sys.prefix if in_venv else None, _library_dirs(service, library_path), owners=libcuda_owners
        ),
    }


#: The argument spec of the module cuda13_stack_probe.
PROBE_SPEC = {
    "modules": {"type": "list", "elements": "str", "default": list(MODULES)},
    "service": {"type": "str", "default": ""},
    "library_path": {"type": "list", "elements": "str", "default": []},
}


def probe_module(params: dict, check_mode: bool) -> dict:
    """The module cuda13_stack_probe: :func:`probe`, what the imports print sent to stderr so
    that stdout carries the module's result alone."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        found = probe(
            params.get("modules") or MODULES,
            service=params.get("service") or "",
            library_path=params.get("library_path") or [],
        )
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
    return {"changed": False, "probe": found}


def main() -> int:
    json.dump(probe(sys.argv[1:]), sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
