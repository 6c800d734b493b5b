"""Where a command computes: ``auto | cpu | cuda | cuda:<i>``, and the default memory budget there.

One resolver for every command (precompute, calibrate, train): ``auto`` is the first CUDA device
when torch sees one, else the CPU. The default budget is 90% of the device's free memory on a GPU
and half of the free RAM on the host (:func:`gnnprep.core.sizes.default_host_budget`).
"""

from __future__ import annotations

import os
import sys

from gnnprep.core.errors import OptionError
from gnnprep.core.sizes import default_host_budget

CHOICES = "auto, cpu, cuda or cuda:<index>"


def check_name(name: str) -> str:
    """``name`` if it is a device spec at all (no hardware is looked at), else an OptionError."""
    if name in ("auto", "cpu", "cuda"):
        return name
    if name.startswith("cuda:") and name[5:].isdigit():
        return name
    raise OptionError("--device", f"{name!r}: expected {CHOICES}")


# device files of the NVIDIA and AMD (ROCm) kernel drivers: without one, torch sees no GPU
GPU_DRIVER_FILES = ("/dev/nvidiactl", "/proc/driver/nvidia", "/dev/kfd")


def gpu_driver_absent() -> bool:
    """True on Linux when no GPU driver is loaded, so ``auto`` can answer ``cpu`` without importing
    torch (about 2 s per command on these machines); elsewhere, False (torch decides)."""
    return sys.platform.startswith("linux") and not any(os.path.exists(p) for p in GPU_DRIVER_FILES)


def resolve(name: str) -> str:
    """The concrete device for ``name``: ``"cpu"``, ``"cuda"`` or ``"cuda:<i>"``."""
    check_name(name)
    if name == "cpu" or (name == "auto" and gpu_driver_absent()):
        return "cpu"
    try:
        import torch
    except ImportError:
        if name == "auto":
            return "cpu"
        raise OptionError("--device", f"{name}: torch is not installed") from None
    if not torch.cuda.is_available():
        if name == "auto":
            return "cpu"
        raise OptionError("--device", f"{name}: no CUDA device is available here "
                                      "(torch.cuda.is_available() is False; use auto or cpu)")
    if name == "auto":
        return "cuda"
    if name.startswith("cuda:") and int(name[5:]) >= torch.cuda.device_count():
        raise OptionError("--device", f"{name}: this machine has {torch.cuda.device_count()} CUDA device(s), "
                                      f"cuda:0..cuda:{torch.cuda.device_count() - 1}")
    return name


def torch_device(name: str):
    """:func:`resolve`, as a ``torch.device``."""
    import torch

    return torch.device(resolve(name))


def is_cuda(device: str) -> bool:
    return str(device).startswith("cuda")


def default_budget(device: str) -> int:
    """Bytes a command may use on ``device`` (a resolved name) when no ``--memory-budget`` is given."""
    if is_cuda(device):
        import torch

        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return int(free * 0.9)
    return default_host_budget()
