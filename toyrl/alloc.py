"""Keep freed CPU memory mapped: a glibc setting that matters for vectorized torch on small batches.

Every torch op on a (8192, 16) tensor allocates a fresh 0.5-1 MiB buffer. glibc hands freed heap
memory at the top of the heap back to the kernel as soon as more than a small threshold is free,
so the next call's buffers touch fresh pages, and each first touch is a page fault: ~0.1-0.3 us on
bare metal, ~4 us in a nested virtual machine such as this project's CI runner, where faults were
half the time of ``gigpo`` on a 131k-turn batch. PyTorch's CPU tuning guide recommends a caching
allocator (jemalloc, tcmalloc) for this; on glibc one ``mallopt`` call has the same effect here:

    from toyrl.alloc import keep_freed_memory
    keep_freed_memory()          # True on glibc; the process keeps 64 MiB of freed heap mapped

``toyrl bench credit`` applies it (``--malloc default`` measures without). Nothing else in toyrl
changes the allocator: importing toyrl never touches process-wide settings.
"""
from __future__ import annotations

import ctypes
import ctypes.util

__all__ = ["keep_freed_memory"]

M_TOP_PAD = -2          # glibc mallopt parameters: bytes of slack kept when the heap is trimmed,
M_MMAP_THRESHOLD = -3   # and the size from which a request gets its own mapping (freed: unmapped at once)


def keep_freed_memory(mib: int = 64) -> bool:
    """Ask glibc to keep ``mib`` MiB of freed heap mapped -> whether it took (False: not glibc, nothing changed).

    Two ``mallopt`` calls: ``M_TOP_PAD`` (trimming keeps ``mib`` MiB) and ``M_MMAP_THRESHOLD`` = 32 MiB,
    glibc's own ceiling for it (setting the pad freezes the threshold at 128 KiB otherwise, and every
    larger buffer, e.g. a 1M-token float64 tensor, would be mapped and faulted in afresh).
    """
    if mib < 0:
        raise ValueError(f"mib must be >= 0, got {mib}")
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
        libc.gnu_get_libc_version                                    # only glibc has it
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1 and mallopt(M_TOP_PAD, mib << 20) == 1
