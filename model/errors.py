"""Errors the model layer raises; callers map them to their own error shapes."""


class CheckpointError(ValueError):
    """A checkpoint file is missing, malformed or does not match the model; the message names the file/key."""
