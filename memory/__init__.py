"""Memory: the bottom layer. Places models on the device you have, accounts for every byte, reports it live.

May import: stdlib, torch, safetensors, psutil, pynvml, platformdirs. Never nodes, pipelines, app or Qt.
Nothing happens at import: the app builds one MemoryManager and passes it down.
"""

from memory.config import MemoryConfig, parse_bytes
from memory.estimates import diffusion_working_bytes, kv_cache_bytes
from memory.manager import BudgetExceeded, ComponentSpec, MemoryManager, ModelHandle
from memory.paths import user_data_dir
from memory.telemetry import LoadEvent, NodePeak, Sample, StepEvent, Telemetry, TransferEvent, UnloadEvent

__all__ = [
    "BudgetExceeded",
    "ComponentSpec",
    "LoadEvent",
    "MemoryConfig",
    "MemoryManager",
    "ModelHandle",
    "NodePeak",
    "Sample",
    "StepEvent",
    "Telemetry",
    "TransferEvent",
    "UnloadEvent",
    "diffusion_working_bytes",
    "kv_cache_bytes",
    "parse_bytes",
    "user_data_dir",
]
