"""Optional dependencies: a face that needs a framework the core install leaves out says, in
one line, which extra installs it (`pip install .` has no TensorFlow or Keras;
`pip install ".[tensorflow]"` adds them)."""

from __future__ import annotations

import importlib
from types import ModuleType

_DISPLAY_NAMES = {"tensorflow": "TensorFlow", "keras": "Keras", "torch": "PyTorch", "jax": "JAX"}


def require(module_name: str, extra: str, what: str) -> ModuleType:
    """Import `module_name`, or fail with one line naming the extra that installs it.

    Args:
      module_name: the module `what` needs, e.g. "tensorflow".
      extra: the extra of the `tb-wur-plugin` distribution that installs it, e.g.
        "tensorflow".
      what: the module that needs it, for the message, e.g. "tb_wur_plugin.wur_summary".

    Returns:
      The imported module.

    Raises:
      ImportError: `module_name`, or a module its import needs, is not installed; the message
        is one line, e.g. "tb_wur_plugin.wur_summary needs TensorFlow: pip install
        'tb-wur-plugin[tensorflow]' (or '.[tensorflow]' from a checkout)", raised `from None`
        so that it is the whole error. Any other error of the import (a broken installation)
        propagates as it is.
    """
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        display = _DISPLAY_NAMES.get(module_name, module_name)
        missing = e.name or module_name
        if missing.partition(".")[0] != module_name.partition(".")[0]:
            display += f" (its import needs the missing module {missing!r})"
        raise ImportError(
            f"{what} needs {display}: pip install 'tb-wur-plugin[{extra}]' "
            f"(or '.[{extra}]' from a checkout)",
            name=module_name,
        ) from None
