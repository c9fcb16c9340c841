"""The continuous-time schemes, one per module: importing this package imports every module in it, and each
registers its scheme against trainers.contract — adding a scheme is adding a file here."""
import importlib
import pkgutil

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_module}")
