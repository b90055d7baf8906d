"""One module per explanation method, each registering its class, and what only methods use (the gradients,
the explained-output forward wrapper, the Integrated Gradients quadrature, the attention graph).

Every module here is imported, so that a new method is one new module, found by `explain`, the command line and
the Space with no other edit."""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
