"""glibc's malloc kept from handing the decoder's large per-step tensors back to the kernel between steps.

A decoder step on the CPU allocates a few tensors of tens of megabytes and frees them before the next step: the
output projection's logits (rows × vocabulary × 4 bytes: 30 MB at beam 4 batch 32 for opus-mt-en-de). glibc
serves an allocation that large with an mmap of its own, or from a heap it trims again on free, and a thread other
than the main one gets a heap of its own, unmapped whole once empty: every step the kernel maps those pages anew,
faults each one in and zeroes it, which can double the time of the product that fills them (measurements:
loadtests/README.md).

torch has no caching allocator on the CPU; three glibc limits make one: allocations up to 32 MB (the most glibc
takes) come from a heap, up to 1 GB freed at its top stays there for the next step, and threads that first
allocate after the call share the main heap (one arena; the server's engine process calls it before starting any
other thread). A process that decodes on the CPU then keeps up to that much freed memory instead of returning it.
Elsewhere than glibc this is a no-op.
"""

from __future__ import annotations

import ctypes
import mmap

import torch

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8  # mallopt's parameter numbers (malloc.h)
HEAP_ALLOCATIONS_UP_TO = 32 * 2**20
KEEP_FREED_UP_TO = 2**30


def keep_freed_memory() -> bool:
    """Sets the limits for this whole process; False where the C library is not glibc (or refused them)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    done = [mallopt(M_MMAP_THRESHOLD, HEAP_ALLOCATIONS_UP_TO), mallopt(M_TRIM_THRESHOLD, KEEP_FREED_UP_TO),
            mallopt(M_ARENA_MAX, 1)]
    return all(done)


MADV_DONTNEED = 4
PAGE = mmap.PAGESIZE


def forget_mapped_pages(tensor: torch.Tensor) -> None:
    """Drop the pages of a contiguous tensor read from a memory-mapped file from this process's memory (the file
    keeps its bytes; a later read maps them again). Rounded out to whole pages: neighbours' pages go too and come
    back when read. Never for memory of the process's own, which this would zero. A no-op elsewhere than a C
    library with madvise."""
    start = tensor.data_ptr() // PAGE * PAGE
    end = -(-(tensor.data_ptr() + tensor.numel() * tensor.element_size()) // PAGE) * PAGE
    try:
        madvise = ctypes.CDLL(None).madvise
    except (OSError, AttributeError):
        return
    madvise.argtypes, madvise.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int
    madvise(start, end - start, MADV_DONTNEED)


def release_freed_memory() -> None:
    """Give the memory malloc keeps freed back to the system now (while a model loads: what it frees is not
    needed again by the next step). A no-op elsewhere than glibc."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass
