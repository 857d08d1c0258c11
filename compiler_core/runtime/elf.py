"""Which CPU architecture a shared library was built for, from its ELF header."""
from __future__ import annotations

# e_machine values (ELF specification) for the architectures LLVM builds for here
MACHINES = {62: "x86_64", 183: "aarch64", 243: "riscv64"}


def elf_arch(path) -> str:
    """'x86_64', 'aarch64', ... of a 64-bit little-endian ELF file; ValueError otherwise."""
    with open(path, "rb") as f:
        header = f.read(20)
    if header[:4] != b"\x7fELF":
        raise ValueError(f"{path} is not an ELF file")
    if header[4] != 2 or header[5] != 1:
        raise ValueError(f"{path} is not a 64-bit little-endian ELF file")
    machine = int.from_bytes(header[18:20], "little")
    return MACHINES.get(machine, f"ELF machine {machine}")
