"""Errors a user can cause. The CLI prints each as one line and exits non-zero."""


class WoodpeckerError(Exception):
    """Base of every error caused by user input (model, inputs, plan, options)."""


class ModelError(WoodpeckerError):
    """The model file is malformed or cannot be imported."""


class DynamicShapeError(ModelError):
    """A shape depends on a value known only at run time (bind it with `input_values`)."""


class UnsupportedOpError(ModelError):
    """The model uses op types (or variants) that Woodpecker does not implement."""


class InputError(WoodpeckerError):
    """Inputs given at run time do not match the model: name, shape or dtype."""


class PlanError(WoodpeckerError):
    """A saved plan is missing, corrupt, edited, or from an incompatible version."""


class EngineError(WoodpeckerError):
    """A requested engine is unknown, not installed, or cannot run a node."""


class RunError(WoodpeckerError):
    """A step of a plan failed while running (a library engine refused what it was given)."""
