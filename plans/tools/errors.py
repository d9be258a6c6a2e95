"""The exception tools raise for expected failures."""


class ToolError(Exception):
    """An expected tool failure; its message is shown to people and to the model as is."""
