"""The CPU process an engine decodes in: two OpenMP teams at most (server.runtime.process.in_passing_thread), and
large per-step tensors served from glibc's heap and kept there when freed (model.kernels.cpu_memory)."""

import json
import platform
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.slow

# A fresh process (this one has run torch operators in its main thread) serving one text and one html text with
# inline tags: decoder steps, encoder passes and a word-alignment pass, at 2 intra-op threads. Threads the
# process has beyond its Python threads are OpenMP workers: one per team at 2 intra-op threads.
SERVE = """
import asyncio, json, os, threading, time, torch
from model import demo_model_dir
from server.domain import TextOptions, TranslationJob
from server.runtime.local import load_service
from server.front.registry import ModelEntry
from server.settings import Settings

def workers():  # threads beyond the Python ones, once the workers of exited threads' teams have gone
    counts = []
    for _ in range(50):
        counts.append(len(os.listdir("/proc/self/task")) - len(threading.enumerate()))
        if counts[-3:] == [counts[-1]] * 3:
            break
        time.sleep(0.1)
    return counts[-1]

torch.set_num_threads(2)
before = workers()
service = load_service(ModelEntry("demo", str(demo_model_dir()), "marian", (), (), 1, 512),
                       Settings(dtype="float32", engine_process=False))
jobs = [TranslationJob(texts=("one hundred and seven",), fields=("text",), target_lang="es"),
        TranslationJob(texts=("<p>one <b>hundred</b> and seven</p>",), fields=("text",), target_lang="es",
                       text_options=TextOptions(format="html"))]

async def serve():  # counted while the event loop (and its default executor) lives, as a server's does
    texts = [(await service.translate(job)).texts[0].text for job in jobs]
    return {"texts": texts, "workers": workers() - before}

print(json.dumps(asyncio.run(serve())))
service.close()
"""


@pytest.mark.skipif(not torch.backends.openmp.is_available() or sys.platform != "linux",
                    reason="torch without OpenMP, or no /proc to count threads in")
def test_an_engine_holds_two_openmp_teams_whatever_it_runs():
    """Loading in a thread that exits and aligning in the encoder's thread leave the decoder's and the encoder's
    teams: a third (the loading thread's, an aligner thread's) would put more OpenMP threads than cores in the
    process on a machine of 2 × intra-op threads cores, where libgomp's workers barely spin."""
    done = subprocess.run([sys.executable, "-c", SERVE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["texts"][0] and "<b>" in result["texts"][1]  # decoded, and aligned
    assert result["workers"] == 2


# 30 MB, the logits of a beam 4 batch 32 step of opus-mt-en-de: glibc's account (mallinfo2) of bytes in blocks
# of their own mmap while it lives, and of free bytes kept in the heap once it is freed.
ALLOCATE = """
import ctypes, json, torch
from model.kernels.cpu_memory import keep_freed_memory

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]

mallinfo2 = ctypes.CDLL(None).mallinfo2
mallinfo2.restype = MallInfo2
assert keep_freed_memory()
logits = torch.empty(30 * 2**18).fill_(1)
mapped = mallinfo2().hblkhd
del logits
print(json.dumps({"mapped": mapped, "kept": mallinfo2().fordblks}))
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc" or platform.libc_ver()[1] < "2.33",
                    reason="the limits are glibc's; mallinfo2 came in 2.33")
def test_a_step_sized_tensor_comes_from_the_heap_and_its_memory_stays_there():
    """glibc's defaults give a first 30 MB allocation an mmap of its own, unmapped when freed, so the next step's
    pages are faulted in and zeroed anew (kernels.cpu_memory); with the limits it comes from the heap and stays."""
    done = subprocess.run([sys.executable, "-c", ALLOCATE], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["mapped"] < 30 * 2**20 <= result["kept"]
