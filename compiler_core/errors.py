class CompileError(ValueError):
    """A model or request the compiler cannot handle; the message says what to fix."""


class RuntimeInputError(ValueError):
    """Feeds that do not match the compiled model's inputs."""
