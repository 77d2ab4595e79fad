"""Errors a user can cause. The CLI prints each as one line and exits non-zero."""


class WoodpeckerError(Exception):
    """Base of every error caused by user input (model, inputs, plan, options)."""


class ModelError(WoodpeckerError):
    """The model file is malformed or cannot be imported."""


class DynamicShapeError(ModelError):
    """A shape depends on a value known only at run time (bind it with `input_values`)."""


class UnsupportedOpError(ModelError):
    """The model uses op types (or variants) that Woodpecker does not implement."""


class OptionsError(WoodpeckerError):
    """An option or argument of the API is unknown, of the wrong type, or out of its range."""


class InputError(WoodpeckerError):
    """Inputs given at run time do not match the model: name, shape or dtype."""


class PlanError(WoodpeckerError):
    """A saved plan is missing, corrupt, edited, or from an incompatible version."""


class EngineError(WoodpeckerError):
    """A requested engine is unknown, not installed, or cannot run a node."""


class KernelFailure(EngineError):
    """A generated kernel returned an error when run; `file`: its compiled object's name."""

    def __init__(self, message: str, file: str) -> None:
        super().__init__(message)
        self.file = file


class RunError(WoodpeckerError):
    """A step of a plan failed while running (a library engine refused what it was given)."""


def first_line(e: BaseException, cause: bool = False) -> str:
    """The first non-empty line of `e`'s message, terminal colour codes removed (the type's
    name for an empty message) — what a one-line error quotes of a library's exception. With
    `cause`, the first line of the innermost `__cause__` follows (exporters wrap the error that
    says what failed)."""
    import re

    def first(x: BaseException) -> str:
        lines = [re.sub(r"\x1b\[[0-9;]*m", "", ln).strip() for ln in str(x).splitlines()]
        return next((ln for ln in lines if ln), type(x).__name__)

    inner = e
    while cause and inner.__cause__ is not None:
        inner = inner.__cause__
    return first(e) if inner is e else f"{first(e)} {first(inner)}"
