"""Parsers of real ``nvidia-smi`` output (standard library only).

Covered forms, as printed by the R570 to R610 driver branches:

* ``nvidia-smi --query-gpu=<fields> --format=csv[,noheader][,nounits]``:
  :func:`parse_query_gpu`, :class:`GpuInventory`;
* the default table (``nvidia-smi`` with no arguments): :func:`parse_table_header`,
  :func:`parse_table`;
* ``nvidia-smi -L``: :func:`parse_list`;
* ``nvidia-smi --version``: :func:`parse_version_info`;
* ``nvidia-smi topo -m``: :func:`parse_topology`;
* failures (driver not loaded, NVML mismatch, no devices, not installed, no
  answer within the time allowed): :func:`classify_failure`.

Every parser raises :class:`~cuda13_upgrade.errors.ParseError` (a ``ValueError``)
that quotes the first line it could not read. Real samples of each form are in
``tests/fixtures/nvidia-smi/`` with a note on where each came from.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from cuda13_upgrade.errors import ParseError

__all__ = [
    "COMPUTE_APPS_FIELDS",
    "INVENTORY_FIELDS",
    "NOT_AVAILABLE",
    "Gpu",
    "GpuInventory",
    "TIMEOUT_OPTION",
    "TIMEOUT_RCS",
    "NvidiaSmiFailure",
    "classify_failure",
    "is_wsl_header",
    "parse_compute_apps",
    "kernel_module_flavour",
    "parse_proc_driver_version",
    "parse_format",
    "parse_list",
    "parse_query_gpu",
    "parse_table",
    "parse_table_header",
    "parse_topology",
    "parse_version_info",
]

#: Values nvidia-smi prints instead of a reading; they parse to ``None``.
NOT_AVAILABLE = frozenset(
    {
        "[N/A]",
        "N/A",
        "[Not Supported]",
        "[Insufficient Permissions]",
        "[Unknown Error]",
        "[GPU is lost]",
        "[Requested functionality has been deprecated]",
    }
)

#: The fields :class:`GpuInventory` queries, in this order.
INVENTORY_FIELDS: tuple[str, ...] = (
    "index",
    "name",
    "uuid",
    "driver_version",
    "compute_cap",
    "memory.total",
    "pci.bus_id",
)

# Aliases from `nvidia-smi --help-query-gpu`; the CSV header prints the canonical name.
_ALIASES = {
    "gpu_name": "name",
    "gpu_bus_id": "pci.bus_id",
    "gpu_serial": "serial",
    "gpu_uuid": "uuid",
}

# Unit nvidia-smi shows in the CSV header ("memory.total [MiB]") and after values
# ("97887 MiB"), and the Python type a value converts to.
_UNITS: dict[str, tuple[str, type]] = {
    "memory.total": ("MiB", int),
    "memory.used": ("MiB", int),
    "memory.free": ("MiB", int),
    "memory.reserved": ("MiB", int),
    "power.draw": ("W", float),
    "power.limit": ("W", float),
    "power.default_limit": ("W", float),
    "power.min_limit": ("W", float),
    "power.max_limit": ("W", float),
    "enforced.power.limit": ("W", float),
    "utilization.gpu": ("%", int),
    "utilization.memory": ("%", int),
    "fan.speed": ("%", int),
    "clocks.sm": ("MHz", int),
    "clocks.mem": ("MHz", int),
    "clocks.gr": ("MHz", int),
    "clocks.max.sm": ("MHz", int),
    "clocks.max.mem": ("MHz", int),
}
_INTEGERS = {"index", "count", "pid", "temperature.gpu", "temperature.memory", "pcie.link.gen.max"}
_UNITS["used_memory"] = ("MiB", int)

# The shape each of these fields has in every real output; anything else (an
# error text printed in place of the value, e.g. "Failed to initialize NVML:
# Driver/library version mismatch" for a one-field query) is refused.
_SHAPES: dict[str, re.Pattern[str]] = {
    "driver_version": re.compile(r"^\d+\.\d+(?:\.\d+)?$"),
    "compute_cap": re.compile(r"^\d{1,2}\.\d$"),
    "uuid": re.compile(r"^(?:GPU|MIG)-[0-9A-Fa-f-]+$"),
    "pci.bus_id": re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$"),
    "vbios_version": re.compile(r"^[0-9A-Fa-f.]+$"),
}

_ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line
    return text


def _failure_hint(text: str) -> str | None:
    failure = classify_failure(1, text, "")
    if failure.code in ("unknown", "ok"):
        return None
    return failure.remedy


def _canonical(name: str) -> str:
    name = name.strip()
    return _ALIASES.get(name, name)


def parse_format(fmt: str) -> tuple[bool, bool]:
    """Read a ``--format`` value.

    Args:
        fmt: ``"csv"``, ``"csv,noheader"``, ``"csv,nounits"`` or
            ``"csv,noheader,nounits"`` (order free, as nvidia-smi accepts it).

    Returns:
        ``(header, units)``: whether the output has a header line and whether
        values carry units.

    Raises:
        ValueError: for a format nvidia-smi does not have (e.g. ``"json"``).
    """
    if not isinstance(fmt, str):
        raise ValueError(f"nvidia-smi format must be a string such as 'csv,noheader', got {fmt!r}")
    parts = [p.strip() for p in fmt.split(",") if p.strip()]
    if "csv" not in parts or any(p not in ("csv", "noheader", "nounits") for p in parts):
        raise ValueError(f"nvidia-smi format must be csv with optional noheader and nounits, got {fmt!r}")
    return "noheader" not in parts, "nounits" not in parts


def _convert(field_name: str, raw: str, units: bool, line: str) -> object:
    value = raw.strip()
    if value in NOT_AVAILABLE:
        return None
    canonical = _canonical(field_name)
    unit_type = _UNITS.get(canonical)
    if unit_type is not None:
        unit, kind = unit_type
        number = value
        if number.endswith(f" {unit}"):
            number = number[: -len(unit) - 1]
        elif units and number.endswith(unit):
            number = number[: -len(unit)]
        try:
            return kind(number)
        except ValueError:
            raise ParseError(
                f"nvidia-smi value of {field_name} is not a number of {unit}",
                line,
                option="fields",
                remedy="check that the fields and --format given here match the command run",
            ) from None  # the message names the value already
    shape = _SHAPES.get(canonical)
    if shape is not None and not shape.match(value):
        raise ParseError(
            f"nvidia-smi value of {field_name} does not have the shape of one",
            line,
            option="fields",
            remedy=_failure_hint(line)
            or "check the command's return code and that the fields and "
            "--format given here match the command run",
        )
    if canonical in _INTEGERS:
        try:
            return int(value)
        except ValueError:
            raise ParseError(
                f"nvidia-smi value of {field_name} is not an integer",
                line,
                option="fields",
                remedy="check that the fields given here match the command run",
            ) from None  # the message names the value already
    return value


def parse_query_gpu(
    text: str,
    fields: Sequence[str] | str,
    fmt: str = "csv,noheader,nounits",
    *,
    rc: int | None = None,
    allow_empty: bool = False,
) -> list[dict[str, object]]:
    """Parse ``nvidia-smi --query-gpu=<fields> --format=<fmt>`` output.

    Args:
        text: stdout of the command.
        fields: the queried fields, in order (a list, or the comma-separated
            string given to ``--query-gpu``), e.g. ``["index", "name",
            "compute_cap", "memory.total"]``.
        fmt: the ``--format`` value used: ``csv``, ``csv,noheader`` or
            ``csv,noheader,nounits``.
        rc: the command's return code when known; non-zero is refused.
        allow_empty: an output without lines is an empty list (for
            ``--query-compute-apps``, which prints nothing when no process
            uses a GPU) instead of an error.

    A value is never an error text: ``driver_version``, ``compute_cap``,
    ``uuid`` and ``pci.bus_id`` must have their real shape, and an output
    holding a known nvidia-smi failure text (NVML mismatch, driver not
    loaded, ...) is refused whatever its shape.

    Returns:
        One dict per GPU line, keyed by the field names as given. Values:
        ``None`` for ``[N/A]``, ``[Not Supported]`` and similar; ``int`` for
        ``index``, ``temperature.gpu``, memory in MiB (``"97887 MiB"`` ->
        ``97887``), utilization in %, clocks in MHz; ``float`` for power in W;
        ``str`` for everything else (``compute_cap`` stays ``"12.0"``).

    Raises:
        ParseError: empty output, a header that does not name the fields, a line
            with the wrong number of values, or a value that is not a number
            where one is due; the message quotes the first bad line (and, when
            the text is a known nvidia-smi failure, says what to do).
        ValueError: for a malformed ``fmt`` or an empty ``fields``.
    """
    if isinstance(fields, str):
        fields = [f for f in fields.split(",")]
    names = [f.strip() for f in fields]
    if not names or any(not n for n in names):
        raise ValueError(f"fields must name at least one nvidia-smi field, got {fields!r}")
    header, units = parse_format(fmt)
    if not isinstance(text, str):
        raise ParseError(
            "nvidia-smi output must be text",
            text,
            option="text",
            remedy="pass the command's stdout",
        )
    failure = classify_failure(rc or 0, text, "")
    if failure.code not in ("ok", "unknown") or (rc not in (None, 0)):
        raise ParseError(
            f"nvidia-smi failed (rc {rc if rc is not None else 'unknown'}, {failure.code})",
            failure.detail or _first_line(text),
            remedy=failure.remedy,
        )
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines and allow_empty:
        return []
    if not lines:
        raise ParseError(
            "nvidia-smi printed no GPU line",
            text,
            remedy="check the command's return code and stderr (no GPU, or the driver is not loaded)",
        )
    if header:
        got = [_canonical(re.sub(r"\s*\[[^\]]*\]$", "", h)) for h in lines[0].split(",")]
        if got != [_canonical(n) for n in names]:
            hint = _failure_hint(text)
            raise ParseError(
                "nvidia-smi CSV header does not name the queried fields",
                lines[0],
                option="fields",
                remedy=hint or f"query {','.join(names)} with --format={fmt}",
            )
        lines = lines[1:]
        if not lines:
            raise ParseError(
                "nvidia-smi printed a header but no GPU line",
                text,
                remedy="check the command's return code and stderr",
            )
    rows: list[dict[str, object]] = []
    for line in lines:
        values = line.split(",")
        if len(values) != len(names):
            hint = _failure_hint(text)
            raise ParseError(
                f"nvidia-smi line does not have one value per queried field ({len(values)} "
                f"values, {len(names)} fields)",
                line,
                option="fields",
                remedy=hint or f"query exactly {','.join(names)} with --format={fmt}",
            )
        rows.append({name: _convert(name, raw, units, line) for name, raw in zip(names, values, strict=True)})
    return rows


@dataclass(frozen=True)
class Gpu:
    """One GPU of a host, from the query output.

    Attributes:
        index: nvidia-smi's index (``0`` ...).
        name: product name, e.g. ``"NVIDIA RTX PRO 6000 Blackwell Server Edition"``.
        compute_capability: e.g. ``"12.0"``; ``None`` when nvidia-smi printed [N/A].
        memory_total_mib: total memory in MiB (``97887``); ``None`` when [N/A]
            (unified-memory parts such as GB10 print [N/A]).
        uuid: ``"GPU-..."``.
        pci_bus_id: ``"00000000:01:00.0"``.
    """

    index: int
    name: str
    compute_capability: str | None
    memory_total_mib: int | None
    uuid: str
    pci_bus_id: str


@dataclass(frozen=True)
class GpuInventory:
    """The GPUs of a host and their driver.

    Attributes:
        driver_version: e.g. ``"590.48.01"`` (one driver serves all GPUs).
        gpus: the GPUs, by index.
    """

    driver_version: str
    gpus: tuple[Gpu, ...] = field(default_factory=tuple)

    @property
    def count(self) -> int:
        """Number of GPUs."""
        return len(self.gpus)

    @property
    def compute_capabilities(self) -> list[str]:
        """The distinct compute capabilities, sorted (``["12.0"]``)."""
        return sorted({g.compute_capability for g in self.gpus if g.compute_capability})

    @classmethod
    def from_query(
        cls,
        text: str,
        fields: Sequence[str] | str = INVENTORY_FIELDS,
        fmt: str = "csv,noheader,nounits",
    ) -> GpuInventory:
        """Build the inventory from ``nvidia-smi --query-gpu=...`` output.

        Args:
            text: stdout of ``nvidia-smi --query-gpu=index,name,uuid,driver_version,
                compute_cap,memory.total,pci.bus_id --format=<fmt>``.
            fields: the queried fields; must include those of
                :data:`INVENTORY_FIELDS`, in any order.
            fmt: the ``--format`` value used.

        Raises:
            ParseError: as :func:`parse_query_gpu`, or when a field is missing, a
                row has no driver version, or rows disagree on it.
        """
        names = [f.strip() for f in (fields.split(",") if isinstance(fields, str) else fields)]
        by_canonical = {_canonical(n): n for n in names}
        missing = [f for f in INVENTORY_FIELDS if f not in by_canonical]
        if missing:
            raise ParseError(
                "GPU inventory query lacks fields",
                missing,
                option="fields",
                remedy=f"query {','.join(INVENTORY_FIELDS)}",
            )
        rows = parse_query_gpu(text, names, fmt)
        drivers = {row[by_canonical["driver_version"]] for row in rows}
        if len(drivers) != 1 or None in drivers:
            raise ParseError(
                "GPUs report different or no driver versions",
                sorted(str(d) for d in drivers),
                remedy="reboot so that one driver serves every GPU",
            )
        gpus = tuple(
            sorted(
                (
                    Gpu(
                        index=int(row[by_canonical["index"]]),  # type: ignore[arg-type]
                        name=str(row[by_canonical["name"]]),
                        compute_capability=row[by_canonical["compute_cap"]],  # type: ignore[arg-type]
                        memory_total_mib=row[by_canonical["memory.total"]],  # type: ignore[arg-type]
                        uuid=str(row[by_canonical["uuid"]]),
                        pci_bus_id=str(row[by_canonical["pci.bus_id"]]),
                    )
                    for row in rows
                ),
                key=lambda g: g.index,
            )
        )
        return cls(driver_version=str(drivers.pop()), gpus=gpus)

    def to_dict(self) -> dict[str, object]:
        """Plain dict: ``driver_version``, ``count``, ``compute_capabilities``, ``gpus``."""
        return {
            "driver_version": self.driver_version,
            "count": self.count,
            "compute_capabilities": self.compute_capabilities,
            "gpus": [asdict(g) for g in self.gpus],
        }


_HEADER_RE = re.compile(
    r"NVIDIA-SMI\s+(?P<smi>\S+)\s+(?:Driver|KMD)\s+Version:\s+(?P<driver>\S+)"
    r"\s+CUDA(?:\s+UMD)?\s+Version:\s+(?P<cuda>\S+)"
)


def parse_table_header(text: str) -> dict[str, str | None]:
    """Read the versions from the header of the default ``nvidia-smi`` table.

    Handles ``| NVIDIA-SMI 590.48.01   Driver Version: 590.48.01   CUDA Version: 13.1 |``
    and the R610 wording ``KMD Version: ... CUDA UMD Version: ...``.

    Returns:
        ``{"nvidia_smi_version": "590.48.01", "driver_version": "590.48.01",
        "cuda_version": "13.1"}``; ``cuda_version`` is ``None`` when nvidia-smi
        prints ``N/A`` (no libcuda, e.g. in a container without the driver's
        user-space libraries). ``cuda_version`` is the newest CUDA release the
        driver supports.

    Raises:
        ParseError: no header line; the message quotes the first line of ``text``
            and, for a known failure text, what to do.
    """
    if isinstance(text, str):
        for line in text.splitlines():
            match = _HEADER_RE.search(line)
            if match:
                cuda = match.group("cuda")
                return {
                    "nvidia_smi_version": match.group("smi"),
                    "driver_version": match.group("driver"),
                    "cuda_version": None if cuda in NOT_AVAILABLE else cuda,
                }
    text = text if isinstance(text, str) else repr(text)
    raise ParseError(
        "no 'NVIDIA-SMI ... Driver Version: ... CUDA Version: ...' line in nvidia-smi output",
        _first_line(text),
        remedy=_failure_hint(text) or "pass the output of plain 'nvidia-smi'",
    )


_ROW1_CELL1 = re.compile(r"^\s*(\d+)\s+(.*?)\s+(On|Off|N/A)\s*$")
_ROW1_CELL2 = re.compile(r"^\s*(\S+)\s+(On|Off|N/A)\s*$")
_ROW2_CELL1 = re.compile(r"^\s*(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s*/\s*(\S+)\s*$")
_MEM_CELL = re.compile(r"^\s*(\d+)MiB\s*/\s*(\d+)MiB\s*$")
_PROC_ROW = re.compile(r"^\|\s+(\d+)\s+(\S+)\s+(\S+)\s+(\d+)\s+(\S+)\s+(.*?)\s+(\d+)MiB\s*\|$")
# "|  0    3   1   2  |              71MiB /  9984MiB    | 14      0 |  2   0    1    0    0 |"
_MIG_ROW = re.compile(
    r"^\|\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*\|\s*(\d+)MiB\s*/\s*(\d+)MiB\s*\|\s*(\d+)\s+(\S+)\s*\|"
    r"\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*\|$"
)
# "|                  |               0MiB /  6105MiB    |           |                       |"
_MIG_BAR1 = re.compile(r"^\|\s+\|\s*(\d+)MiB\s*/\s*(\d+)MiB\s*\|")
_MIG_FIELDS = ("gpu", "gi", "ci", "mig_dev", "memory_used_mib", "memory_total_mib", "sm", "ecc",
               "ce", "enc", "dec", "ofa", "jpg")  # fmt: skip


def _num(value: str, suffix: str) -> int | None:
    value = value.strip()
    if value.endswith(suffix) and value[: -len(suffix)].isdigit():
        return int(value[: -len(suffix)])
    return None


def parse_table(text: str) -> dict[str, object]:
    """Parse the default ``nvidia-smi`` table: header, GPU rows and processes.

    Returns:
        The keys of :func:`parse_table_header` plus ``gpus``, a list of dicts with
        ``index`` (int), ``name`` (as printed: long names are cut to 24 characters
        and ``"..."``), ``persistence_mode``, ``bus_id``, ``display_active``,
        ``ecc`` (the "Volatile Uncorr. ECC" cell), ``fan`` (``"N/A"`` or
        ``"30%"``), ``temperature_c``, ``perf`` (``"P8"``), ``power_usage_w``,
        ``power_cap_w``, ``memory_used_mib``, ``memory_total_mib`` (ints or
        ``None`` where nvidia-smi prints N/A), ``utilization_pct``,
        ``compute_mode``, ``mig_mode``; ``mig_devices``, the rows of the "MIG
        devices" box (printed when a GPU has MIG enabled; empty when it says
        "No MIG devices found" or is absent), dicts of ints ``gpu``, ``gi``,
        ``ci``, ``mig_dev``, ``memory_used_mib``, ``memory_total_mib``,
        ``bar1_used_mib``, ``bar1_total_mib`` (MiB; the memory is shared by the
        compute instances of one GPU instance), ``sm``, ``ecc`` (``None`` for
        N/A), ``ce``, ``enc``, ``dec``, ``ofa``, ``jpg`` (engine counts); and
        ``processes``, a list of dicts with ``gpu``, ``gi``, ``ci`` (strings,
        ``None`` for N/A: a process outside MIG), ``pid``, ``type``, ``name``,
        ``memory_mib``.

    Sources: the R570, R575, R580, R590 and R610 tables in
    ``tests/fixtures/nvidia-smi/table-*.txt`` (MIG: the R580 A100 host with
    four MIG devices, the R580 RTX PRO 6000 Max-Q with none, the R610 views).

    Raises:
        ParseError: as :func:`parse_table_header`, or a GPU row that cannot be read.
    """
    header = parse_table_header(text)
    lines = text.splitlines()
    gpus: list[dict[str, object]] = []
    processes: list[dict[str, object]] = []
    mig_devices: list[dict[str, object]] = []
    in_gpus = False
    in_mig = False
    in_procs = False
    i = 0
    while i < len(lines):
        line = lines[i].rstrip()
        if line.startswith("|=") and "+" in line and not in_procs and not gpus:
            in_gpus = True
            i += 1
            continue
        if in_gpus:
            cells = line.split("|")[1:-1] if line.startswith("|") else []
            if len(cells) == 3 and _ROW1_CELL1.match(cells[0]):
                block = [line] + [lines[j].rstrip() for j in range(i + 1, min(i + 3, len(lines)))]
                gpus.append(_parse_gpu_block(block))
                i += 3 if len(block) == 3 and block[2].startswith("|") else 2
                continue
            if line.startswith("+") or (line.startswith("|") and set(line) <= set("|-+")):
                i += 1
                continue
            in_gpus = False
        if line.startswith("| MIG devices:"):
            in_mig = True
        elif in_mig and (mig := _MIG_ROW.match(line)):
            values = [int(v) if v.isdigit() else None for v in mig.groups()]
            device: dict[str, object] = dict(zip(_MIG_FIELDS, values, strict=True))
            bar1 = _MIG_BAR1.match(lines[i + 1].rstrip()) if i + 1 < len(lines) else None
            device["bar1_used_mib"] = int(bar1.group(1)) if bar1 else None
            device["bar1_total_mib"] = int(bar1.group(2)) if bar1 else None
            mig_devices.append(device)
        elif in_mig and not line.startswith(("|", "+")):
            in_mig = False
        if line.startswith("| Processes:"):
            in_mig = False
            in_procs = True
        elif in_procs:
            match = _PROC_ROW.match(line)
            if match:
                gpu, gi, ci, pid, kind, name, mem = match.groups()
                processes.append(
                    {
                        "gpu": int(gpu),
                        "gi": None if gi == "N/A" else gi,
                        "ci": None if ci == "N/A" else ci,
                        "pid": int(pid),
                        "type": kind,
                        "name": name,
                        "memory_mib": int(mem),
                    }
                )
            elif line.startswith("+"):
                in_procs = False
        i += 1
    return {**header, "gpus": gpus, "mig_devices": mig_devices, "processes": processes}


def _parse_gpu_block(block: list[str]) -> dict[str, object]:
    row1 = block[0].split("|")[1:-1]
    row2 = block[1].split("|")[1:-1] if len(block) > 1 else []
    row3 = block[2].split("|")[1:-1] if len(block) > 2 else []
    m1 = _ROW1_CELL1.match(row1[0])
    m2 = _ROW1_CELL2.match(row1[1])
    m3 = _ROW2_CELL1.match(row2[0]) if len(row2) == 3 else None
    if not (m1 and m2 and m3):
        raise ParseError(
            "nvidia-smi table GPU row is not 'index name persistence | bus-id disp | ecc' "
            "followed by 'fan temp perf power | memory | util compute-mode'",
            block[0] if not (m1 and m2) else (block[1] if len(block) > 1 else ""),
            remedy="pass the unmodified output of plain 'nvidia-smi'",
        )
    index, name, persistence = m1.groups()
    bus_id, disp = m2.groups()
    fan, temp, perf, usage, cap = m3.groups()
    mem = _MEM_CELL.match(row2[1])
    util_cells = row2[2].split()
    return {
        "index": int(index),
        "name": name,
        "persistence_mode": persistence,
        "bus_id": bus_id,
        "display_active": disp,
        "ecc": row1[2].strip(),
        "fan": fan,
        "temperature_c": _num(temp, "C"),
        "perf": perf,
        "power_usage_w": _num(usage, "W"),
        "power_cap_w": _num(cap, "W"),
        "memory_used_mib": int(mem.group(1)) if mem else None,
        "memory_total_mib": int(mem.group(2)) if mem else None,
        "utilization_pct": _num(util_cells[0], "%") if util_cells else None,
        "compute_mode": " ".join(util_cells[1:]) if len(util_cells) > 1 else None,
        "mig_mode": row3[2].strip() if len(row3) == 3 else None,
    }


_LIST_GPU_RE = re.compile(r"^GPU (\d+): (.+?) \(UUID: (GPU-[0-9A-Fa-f-]+)\)$")
_LIST_MIG_RE = re.compile(r"^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[0-9A-Fa-f-]+)\)$")


def parse_list(text: str) -> list[dict[str, object]]:
    """Parse ``nvidia-smi -L``.

    Input lines: ``GPU 0: NVIDIA RTX PRO 6000 Blackwell Server Edition (UUID: GPU-...)``,
    optionally followed by MIG lines ``  MIG 1g.24gb     Device  0: (UUID: MIG-...)``.

    Returns:
        ``[{"index": 0, "name": "...", "uuid": "GPU-...", "mig_devices":
        [{"profile": "1g.24gb", "device": 0, "uuid": "MIG-..."}]}, ...]``.

    Raises:
        ParseError: empty output or a line of another shape (quoted).
    """
    gpus: list[dict[str, object]] = []
    if isinstance(text, str):
        for line in text.splitlines():
            if not line.strip():
                continue
            match = _LIST_GPU_RE.match(line.rstrip())
            if match:
                gpus.append(
                    {
                        "index": int(match.group(1)),
                        "name": match.group(2),
                        "uuid": match.group(3),
                        "mig_devices": [],
                    }
                )
                continue
            mig = _LIST_MIG_RE.match(line.rstrip())
            if mig and gpus:
                devices = gpus[-1]["mig_devices"]
                assert isinstance(devices, list)
                devices.append({"profile": mig.group(1), "device": int(mig.group(2)), "uuid": mig.group(3)})
                continue
            raise ParseError(
                "nvidia-smi -L line is not 'GPU <n>: <name> (UUID: GPU-...)'",
                line,
                remedy=_failure_hint(text) or "pass the unmodified output of 'nvidia-smi -L'",
            )
    if not gpus:
        raise ParseError(
            "nvidia-smi -L listed no GPU",
            text,
            remedy="check the command's return code and stderr",
        )
    return gpus


def parse_version_info(text: str) -> dict[str, str]:
    """Parse ``nvidia-smi --version``.

    Input::

        NVIDIA-SMI version  : 590.48.01
        NVML version        : 590.48
        DRIVER version      : 590.48.01
        CUDA Version        : 13.1

    From R610 the driver's line is deprecated in favour of ``KMD version``
    (``DRIVER version : Deprecated, see "KMD version" instead``) and the CUDA
    line reads ``CUDA UMD version``; a value that is not a version is never
    returned as one.

    Returns:
        Every ``key : value`` line with the key lower-cased and spaces replaced
        by ``_`` (``nvidia-smi_version``, ``nvml_version``, ``driver_version``,
        ``cuda_version``), with ``driver_version`` / ``cuda_version`` taken from
        ``KMD version`` / ``CUDA UMD version`` when those are given or the
        older line's value is not a version.

    Raises:
        ParseError: no ``DRIVER``/``KMD`` line holding a driver version (the
            first line is quoted).
    """
    info: dict[str, str] = {}
    for line in text.splitlines() if isinstance(text, str) else []:
        key, sep, value = line.partition(":")
        if sep and key.strip() and value.strip():
            info[re.sub(r"\s+", "_", key.strip().lower())] = value.strip()
    version = _SHAPES["driver_version"]
    release = re.compile(r"^\d+\.\d+$")
    if info.get("kmd_version") and version.match(info["kmd_version"]):
        info["driver_version"] = info["kmd_version"]
    elif not version.match(info.get("driver_version", "")):
        info["driver_version"] = ""
    if info.get("cuda_umd_version") and release.match(info["cuda_umd_version"]):
        info["cuda_version"] = info["cuda_umd_version"]
    elif not release.match(info.get("cuda_version", "")):
        info["cuda_version"] = ""
    if not info["driver_version"]:
        raise ParseError(
            "no 'DRIVER version : ...' or 'KMD version : ...' line with a driver version in "
            "nvidia-smi --version output",
            _first_line(text) if isinstance(text, str) else text,
            remedy=(_failure_hint(text) if isinstance(text, str) else None)
            or "pass the output of 'nvidia-smi --version'",
        )
    return info


_PROC_VERSION_RE = re.compile(
    r"^NVRM version:\s+NVIDIA UNIX\s+"
    r"(?:(?P<open>Open )?Kernel Module for (?P<arch>\S+)|(?P<arch2>\S+) Kernel Module)"
    r"\s+(?P<version>\d+\.\d+(?:\.\d+)?)\b"
)


def parse_proc_driver_version(text: str) -> dict[str, object]:
    """Read ``/proc/driver/nvidia/version``: the *loaded* kernel module's version.

    Input (R580, open kernel module)::

        NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (...)  <date>
        GCC version:  gcc version 11.4.0 (Ubuntu 11.4.0-1ubuntu1~22.04.2)

    The proprietary module writes ``NVIDIA UNIX x86_64 Kernel Module``. When
    nvidia-smi fails with "Driver/library version mismatch", this is the
    version that is running, and the user-space library's is the one in the
    error's neighbourhood (the driver package).

    Returns:
        ``{"module_version": "580.95.05", "open": True, "arch": "x86_64",
        "gcc": "gcc version 11.4.0 (...)"}`` (``gcc`` is ``None`` without a
        GCC line).

    Raises:
        ParseError: no ``NVRM version`` line (the first line is quoted).
    """
    lines = text.splitlines() if isinstance(text, str) else []
    for line in lines:
        match = _PROC_VERSION_RE.match(line.strip())
        if match:
            gcc = next((ln.partition(":")[2].strip() for ln in lines if ln.startswith("GCC version:")), None)
            return {
                "module_version": match.group("version"),
                "open": bool(match.group("open")),
                "arch": match.group("arch") or match.group("arch2"),
                "gcc": gcc or None,
            }
    raise ParseError(
        "no 'NVRM version: NVIDIA UNIX ... Kernel Module <version>' line in /proc/driver/nvidia/version",
        _first_line(text) if isinstance(text, str) else text,
        remedy="the nvidia kernel module is not loaded (the file exists only while it is): "
        "check 'lsmod | grep nvidia'",
    )


def kernel_module_flavour(text: str) -> dict[str, str]:
    """The flavour of the loaded NVIDIA kernel module, from ``/proc/driver/nvidia/version``.

    The first line names the flavour (NVIDIA driver README, "kernel_open"; the
    open flavour's build writes ``NVIDIA UNIX Open Kernel Module for <arch>``,
    the proprietary one ``NVIDIA UNIX <arch> Kernel Module``)::

        NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (...)
        NVRM version: NVIDIA UNIX x86_64 Kernel Module  525.60.13  Wed Nov 30 06:39:21 UTC 2022

    Returns:
        ``{"flavour": "open" | "proprietary", "driver_version": "580.95.05",
        "arch": "x86_64"}``.

    Raises:
        ParseError: no ``NVRM version`` line (empty, unreadable or another
            file's content); the message names ``/proc/driver/nvidia/version``
            and quotes the first line.
    """
    info = parse_proc_driver_version(text)
    return {
        "flavour": "open" if info["open"] else "proprietary",
        "driver_version": str(info["module_version"]),
        "arch": str(info["arch"]),
    }


def is_wsl_header(header: dict[str, str | None]) -> bool:
    """Whether a table header is WSL's: nvidia-smi's version differs from the driver's.

    Under WSL 2 the Linux user-space (``NVIDIA-SMI 570.124.06``) talks to the
    Windows driver (``Driver Version: 572.70``), so the two versions differ; on
    a Linux host they are one driver's and equal (a mismatch makes nvidia-smi
    fail instead). ``header`` is :func:`parse_table_header`'s result.
    """
    smi = header.get("nvidia_smi_version")
    driver = header.get("driver_version")
    return bool(smi and driver and smi != driver)


COMPUTE_APPS_FIELDS: tuple[str, ...] = ("gpu_uuid", "pid", "process_name", "used_memory")


def parse_compute_apps(text: str, rc: int | None = None) -> list[dict[str, object]]:
    """Parse ``nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory
    --format=csv,noheader,nounits``.

    Returns:
        One dict per process using a GPU: ``gpu_uuid`` (``"GPU-..."``), ``pid``
        (int), ``process_name`` (str), ``used_memory`` (MiB, int or ``None``);
        an empty list when nvidia-smi printed nothing (no process).

    Raises:
        ParseError: as :func:`parse_query_gpu` (a failure text, a non-zero rc).
    """
    return parse_query_gpu(text, list(COMPUTE_APPS_FIELDS), "csv,noheader,nounits", rc=rc, allow_empty=True)


_TOPO_TRAILING = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")


_TOPO_DEVICE_RE = re.compile(r"(?:GPU|NIC)\d+")
_TOPO_LINKS = ("X", "SYS", "NODE", "PHB", "PXB", "PIX", "SOC")
_TOPO_TRAILING_SHAPES = {
    "CPU Affinity": re.compile(r"^(?:[\d,-]+|N/A)$"),
    "NUMA Affinity": re.compile(r"^(?:[\d,-]+|N/A)$"),
    "GPU NUMA ID": re.compile(r"^(?:\d+|N/A)$"),
}


def _split_cells(token: str, vocabulary: re.Pattern[str]) -> list[str] | None:
    """``"PXBNODE"`` -> ``["PXB", "NODE"]``; None when ``token`` is not made of link values."""
    if vocabulary.fullmatch(token):
        return [token]
    parts = re.findall(vocabulary.pattern, token)
    return parts if parts and "".join(parts) == token else None


def parse_topology(text: str) -> dict[str, object]:
    """Parse ``nvidia-smi topo -m``.

    The real output underlines its header with ANSI escapes (even when stdout is
    not a terminal) and separates cells with tabs that do not line up with the
    header. With ten or more NICs a cell can lose its separator and run into the
    next (``PXBNODE``, ``SYSSYS``, ``NODEX``): each row is read as nvidia-smi
    writes it, one cell per column in the header's order, and a cell made of
    several link values (the legend's, ``X`` and ``NV#``) is split back into
    them. A cell that is not a link value, a row with too few or too many link
    cells, or a GPU row whose affinity cell has the wrong shape is refused,
    naming the row and the column: a value is never shifted into another column.

    Returns:
        ``{"devices": ["GPU0", ..., "NIC0"], "links": {"GPU0": {"GPU1": "NODE",
        ...}}, "cpu_affinity": {"GPU0": "0-47,96-143"}, "numa_affinity": {"GPU0":
        "0"}, "gpu_numa_id": {"GPU0": "N/A"}, "legend": {"SYS": "Connection
        traversing PCIe as well as the SMP interconnect ..."}, "nics": {"NIC0":
        "mlx5_0"}}``. The diagonal is ``"X"``.

    Raises:
        ParseError: no header naming GPU0, or a row that cannot be read cell by
            cell (row and column named, the line quoted).
    """
    lines = [_ANSI_RE.sub("", line) for line in text.splitlines()] if isinstance(text, str) else []
    header_index = next(
        (i for i, line in enumerate(lines) if line.split() and line.split()[0].startswith("GPU0")),
        None,
    )
    if header_index is None:
        raise ParseError(
            "no nvidia-smi topo -m header row naming GPU0",
            _first_line(text) if isinstance(text, str) else text,
            remedy=(_failure_hint(text) if isinstance(text, str) else None)
            or "pass the output of 'nvidia-smi topo -m'",
        )
    header = lines[header_index]
    trailing = [name for name in _TOPO_TRAILING if name in header]
    for name in trailing:
        header = header.replace(name, " ")
    devices: list[str] = []
    for token in header.split():
        names = _TOPO_DEVICE_RE.findall(token)
        if not names or "".join(names) != token:
            raise ParseError(
                f"nvidia-smi topo -m header cell {token!r} is not a device name",
                lines[header_index],
                remedy="pass the unmodified output of 'nvidia-smi topo -m'",
            )
        devices.extend(names)
    legend_keys = set(_TOPO_LINKS)
    in_legend = False
    for line in lines[header_index + 1 :]:
        stripped = line.strip()
        if stripped == "Legend:":
            in_legend = True
        elif stripped == "NIC Legend:":
            in_legend = False
        elif in_legend and "=" in stripped:
            key = stripped.partition("=")[0].strip()
            if key and key != "NV#":
                legend_keys.add(key)
    vocabulary = re.compile(
        "|".join(sorted((re.escape(k) for k in legend_keys), key=len, reverse=True)) + r"|NV\d+"
    )
    links: dict[str, dict[str, str]] = {}
    affinity: dict[str, dict[str, str]] = {name: {} for name in _TOPO_TRAILING}
    legend: dict[str, str] = {}
    nics: dict[str, str] = {}
    section = "matrix"
    for line in lines[header_index + 1 :]:
        stripped = line.strip()
        if not stripped:
            continue
        if stripped == "Legend:":
            section = "legend"
            continue
        if stripped == "NIC Legend:":
            section = "nics"
            continue
        if section == "legend":
            key, _, value = stripped.partition("=")
            legend[key.strip()] = value.strip()
            continue
        if section == "nics":
            key, _, value = stripped.partition(":")
            nics[key.strip()] = value.strip()
            continue
        tokens = stripped.split()
        name = tokens[0]
        if name not in devices:
            raise ParseError(
                "nvidia-smi topo -m row does not start with a device of the header",
                line,
                remedy="pass the unmodified output of 'nvidia-smi topo -m'",
            )
        cells: list[str] = []
        position = 1
        while len(cells) < len(devices) and position < len(tokens):
            parts = _split_cells(tokens[position], vocabulary)
            if parts is None:
                raise ParseError(
                    f"nvidia-smi topo -m row {name}, column {devices[len(cells)]}: cell "
                    f"{tokens[position]!r} is not a link value ({', '.join(sorted(legend_keys))}, NV#)",
                    line,
                    remedy="pass the unmodified output of 'nvidia-smi topo -m'",
                )
            cells.extend(parts)
            position += 1
        if len(cells) != len(devices):
            column = devices[min(len(cells), len(devices) - 1)]
            raise ParseError(
                f"nvidia-smi topo -m row {name} has {len(cells)} link cells for {len(devices)} "
                f"devices (column {column})",
                line,
                remedy="pass the unmodified output of 'nvidia-smi topo -m'",
            )
        links[name] = dict(zip(devices, cells, strict=True))
        rest = tokens[position:]
        if name.startswith("GPU") and rest:
            for column, value in zip(trailing, rest, strict=False):
                if not _TOPO_TRAILING_SHAPES[column].match(value):
                    raise ParseError(
                        f"nvidia-smi topo -m row {name}, column {column}: {value!r} is not an affinity",
                        line,
                        remedy="pass the unmodified output of 'nvidia-smi topo -m'",
                    )
                affinity[column][name] = value
    return {
        "devices": devices,
        "links": links,
        "cpu_affinity": affinity["CPU Affinity"],
        "numa_affinity": affinity["NUMA Affinity"],
        "gpu_numa_id": affinity["GPU NUMA ID"],
        "legend": legend,
        "nics": nics,
    }


@dataclass(frozen=True)
class NvidiaSmiFailure:
    """What a failed nvidia-smi run means.

    Attributes:
        code: ``"ok"``, ``"timeout"``, ``"not_installed"``, ``"driver_not_loaded"``,
            ``"driver_library_mismatch"``, ``"no_devices"``,
            ``"no_supported_gpus"``, ``"invalid_argument"``,
            ``"insufficient_permissions"``, ``"gpu_lost"`` or ``"unknown"``.
        remedy: what to do, one sentence.
        detail: the line of output that decided, or ``""``.
        rc: the return code given (``None`` when the run has none: the task's own
            timeout ended it).
        timeout_s: the seconds nvidia-smi was given, for a ``"timeout"``; else ``None``.
    """

    code: str
    remedy: str
    detail: str
    rc: int | None
    timeout_s: float | None = None

    @property
    def summary(self) -> str:
        """What happened, after the command's name: ``"failed (rc 9, driver_not_loaded):
        NVIDIA-SMI has failed ..."``, or ``"did not answer within 60 s
        (nvidia_driver_check_nvidia_smi_timeout)"``; ``""`` for ``"ok"``."""
        if self.code == "ok":
            return ""
        if self.code == "timeout":
            within = f"within {self.timeout_s:g} s" if self.timeout_s is not None else "in time"
            return f"did not answer {within} ({TIMEOUT_OPTION})"
        rc = "unknown" if self.rc is None else self.rc
        return f"failed (rc {rc}, {self.code}): {self.detail}"

    def to_dict(self) -> dict[str, object]:
        """Plain dict of the attributes and ``summary``."""
        return {**asdict(self), "summary": self.summary}


#: The option that sets how long one nvidia-smi run may take
#: (roles/nvidia_driver_check, its argument spec).
TIMEOUT_OPTION = "nvidia_driver_check_nvidia_smi_timeout"

#: Exit statuses of coreutils ``timeout --foreground --kill-after=K N CMD`` (timeout(1),
#: EXIT STATUS) when it ended the command: 124 after its TERM signal; 137 (128 + KILL)
#: when the command outlived TERM by K seconds and was killed. nvidia-smi(1) documents
#: neither as its own (RETURN VALUE: 0-15 and 255).
TIMEOUT_RCS: tuple[int, ...] = (124, 137)

_TIMEOUT_REMEDY = (
    "a hung nvidia-smi means the driver cannot reach a GPU: read the kernel log "
    "('dmesg' or 'journalctl -k') for NVRM lines (RmInitAdapter failed, GSP timeouts) and Xid "
    "errors, check that the loaded kernel module is the flavour the GPUs need (Blackwell: the "
    "open kernel module, /proc/driver/nvidia/version) and that no GPU is in a bad state (one "
    "needs a reset or a power cycle of the host); raise " + TIMEOUT_OPTION + " only when "
    "nvidia-smi answers, slowly, on a healthy host"
)


# (code, pattern in stdout/stderr, return code, remedy). Texts and return codes are
# those of real nvidia-smi runs (tests/fixtures/nvidia-smi/failure-*.txt) and of the
# RETURN VALUE section of nvidia-smi(1): 2 invalid argument, 4 no permission, 6 object
# not found, 9 driver not loaded, 15 GPU fell off the bus, 255 other error. 18 is what
# the NVML "Driver/library version mismatch" failure exits with in the field.
_FAILURES: tuple[tuple[str, re.Pattern[str], int | None, str], ...] = (
    (
        "driver_library_mismatch",
        re.compile(r"Driver/library version mismatch", re.IGNORECASE),
        18,
        "the loaded kernel module and the user-space NVML library are different driver "
        "versions (a driver package was upgraded without a reboot): reboot the host, or "
        "unload and reload the nvidia kernel modules",
    ),
    (
        "driver_not_loaded",
        re.compile(r"couldn.t communicate with the NVIDIA driver", re.IGNORECASE),
        9,
        "the NVIDIA kernel module is not loaded: check 'lsmod | grep nvidia' and dmesg, "
        "rebuild it for the running kernel (DKMS) or reboot into a kernel it was built for",
    ),
    (
        "no_supported_gpus",
        re.compile(r"No supported GPUs were found", re.IGNORECASE),
        255,
        "the driver loaded but supports none of the GPUs: install a driver branch that "
        "supports them (Blackwell needs the open kernel modules, R570 or newer)",
    ),
    (
        "no_devices",
        re.compile(r"No devices were found", re.IGNORECASE),
        6,
        "the driver sees no GPU: check lspci, the open kernel module (required for "
        "Blackwell), and dmesg for RmInitAdapter errors",
    ),
    (
        "gpu_lost",
        re.compile(r"fallen off the bus|GPU is lost", re.IGNORECASE),
        15,
        "a GPU fell off the bus: drain the host and power-cycle it before any upgrade",
    ),
    (
        "invalid_argument",
        re.compile(r"is not a valid field to query|Invalid combination of input arguments"),
        2,
        "the nvidia-smi command line is wrong for this driver: check the query fields "
        "with 'nvidia-smi --help-query-gpu'",
    ),
    (
        "insufficient_permissions",
        re.compile(r"Insufficient Permissions", re.IGNORECASE),
        4,
        "run the command as root or a user with access to /dev/nvidia*",
    ),
    (
        "not_installed",
        re.compile(r"nvidia-smi: (?:command )?not found|No such file or directory", re.IGNORECASE),
        127,
        "nvidia-smi is not installed: install the NVIDIA driver's utilities "
        "(e.g. nvidia-utils-<branch>) before running the upgrade",
    ),
)


def classify_failure(
    rc: int | None,
    stdout: str = "",
    stderr: str = "",
    *,
    timeout_s: float | None = None,
    timed_out: bool = False,
) -> NvidiaSmiFailure:
    """Say what a failed nvidia-smi run means and what to do.

    A run that did not finish in time is a ``"timeout"``, whatever partial output
    it left: ``timed_out`` (Ansible's task timeout ended it, the result's
    ``timedout``), or, when it ran under coreutils ``timeout`` (``timeout_s``
    given), a return code of :data:`TIMEOUT_RCS`. Otherwise the output text
    decides first (wrappers such as a shell may change the return code); the
    return code decides when the text is not recognised.

    Args:
        rc: the return code (``127`` when the shell did not find the command;
            ``None`` when the run has none).
        stdout: standard output (nvidia-smi prints its errors there).
        stderr: standard error.
        timeout_s: the seconds given to ``timeout`` (the option
            :data:`TIMEOUT_OPTION`), when nvidia-smi ran under it.
        timed_out: the run was ended by a timeout of its own (Ansible's).

    Returns:
        A :class:`NvidiaSmiFailure`; ``code == "ok"`` when ``rc == 0`` and no
        failure text is present.
    """
    if timed_out or (timeout_s is not None and rc in TIMEOUT_RCS):
        partial = _first_line(f"{stdout or ''}\n{stderr or ''}").strip()
        return NvidiaSmiFailure("timeout", _TIMEOUT_REMEDY, partial, rc, timeout_s)
    text = f"{stdout or ''}\n{stderr or ''}"
    for code, pattern, _rc, remedy in _FAILURES:
        for line in text.splitlines():
            if pattern.search(line):
                return NvidiaSmiFailure(code, remedy, line.strip(), rc)
    if rc == 0:
        return NvidiaSmiFailure("ok", "", "", rc)
    for code, _pattern, code_rc, remedy in _FAILURES:
        if code_rc == rc:
            return NvidiaSmiFailure(code, remedy, _first_line(text).strip(), rc)
    how = "did not run" if rc is None else f"failed with return code {rc}"
    return NvidiaSmiFailure(
        "unknown",
        f"nvidia-smi {how}: read its output and the kernel log (dmesg)",
        _first_line(text).strip(),
        rc,
    )
