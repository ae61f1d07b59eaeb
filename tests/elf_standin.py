"""Stand-in shared objects: the smallest ELF files whose dynamic section names
chosen ``DT_NEEDED`` libraries, for tests of what the stack probe reads.

Layout (System V ABI, ELF-64 Object File Format): the ELF header, two program
headers (one ``PT_LOAD`` mapping the whole file at address 0x400000, one
``PT_DYNAMIC``), the string table, then the dynamic section (``DT_NEEDED``
per library, ``DT_STRTAB``, ``DT_STRSZ``, ``DT_NULL``). ``readelf -d`` reads
it; it has no code and is not meant to be loaded.
"""

from __future__ import annotations

import struct
from pathlib import Path

_BASE = 0x400000
_EHDR, _PHDR = 64, 56
_DT_NULL, _DT_NEEDED, _DT_STRTAB, _DT_STRSZ = 0, 1, 5, 10


def elf_with_needed(needed: list[str]) -> bytes:
    """The bytes of an x86-64 ELF shared object (``ET_DYN``) needing ``needed``, in order."""
    strtab = b"\0"
    offsets = []
    for name in needed:
        offsets.append(len(strtab))
        strtab += name.encode() + b"\0"
    strtab_off = _EHDR + 2 * _PHDR
    dyn_off = (strtab_off + len(strtab) + 7) & ~7
    entries = [(_DT_NEEDED, off) for off in offsets]
    entries += [(_DT_STRTAB, _BASE + strtab_off), (_DT_STRSZ, len(strtab)), (_DT_NULL, 0)]
    dynamic = b"".join(struct.pack("<qQ", tag, value) for tag, value in entries)
    size = dyn_off + len(dynamic)
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)  # 64-bit, little-endian, version 1
    header = ident + struct.pack(
        "<HHIQQQIHHHHHH", 3, 62, 1, 0, _EHDR, 0, 0, _EHDR, _PHDR, 2, 64, 0, 0
    )  # ET_DYN, EM_X86_64, no entry, program headers right after, no sections
    load = struct.pack("<IIQQQQQQ", 1, 4, 0, _BASE, _BASE, size, size, 0x1000)  # PT_LOAD, R
    dyn = struct.pack(
        "<IIQQQQQQ", 2, 4, dyn_off, _BASE + dyn_off, _BASE + dyn_off, len(dynamic), len(dynamic), 8
    )
    body = header + load + dyn + strtab
    return body + bytes(dyn_off - len(body)) + dynamic


def write_elf(path: Path, needed: list[str]) -> Path:
    """Write :func:`elf_with_needed` to ``path`` (parents created); returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(elf_with_needed(needed))
    return path
