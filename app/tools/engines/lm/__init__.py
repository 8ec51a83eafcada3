"""The ``lm`` tool engine: a model simulates each tool's result (``engine.LmEngine``), from a
prompt of the session's earlier calls (``prompt``), with error injection (``injection``);
``factory.create_lm_engine`` builds it from an operator's options."""

from app.tools.engines.lm.engine import LmEngine
from app.tools.engines.lm.factory import LmOptions, create_lm_engine
from app.tools.engines.lm.injection import ErrorInjection, ErrorRates, InjectedError
from app.tools.engines.lm.prompt import SYSTEM_INSTRUCTION, Sampling

__all__ = [
    "SYSTEM_INSTRUCTION",
    "ErrorInjection",
    "ErrorRates",
    "InjectedError",
    "LmEngine",
    "LmOptions",
    "Sampling",
    "create_lm_engine",
]
