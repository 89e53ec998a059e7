"""Errors the model layer raises; callers map them to their own error shapes."""


class CheckpointError(ValueError):
    """A checkpoint file is missing, malformed or does not match the model; the message names the file/key."""


# Audio that cannot be used (model/audio/decode.py); each pickles as its constructor's arguments, so it crosses
# process pipes intact.

class BadAudio(ValueError):
    """A file that is not audio this package reads, or is damaged: `reason` says which, in a few words."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class AudioTooLong(ValueError):
    """Audio longer than the duration limit (seconds): `seconds` as its header declares it, or (`at_least`) as far as
    it was decoded before decoding stopped."""

    def __init__(self, seconds: float, limit: float, at_least: bool = False):
        super().__init__(f"the audio is {'at least ' if at_least else ''}{seconds:.1f} s long; at most {limit:g} s")
        self.seconds, self.limit, self.at_least = seconds, limit, at_least

    def __reduce__(self):
        return type(self), (self.seconds, self.limit, self.at_least)


class AudioTooLarge(ValueError):
    """An audio file of more bytes than the limit."""

    def __init__(self, size: int, limit: int):
        super().__init__(f"the audio file has {size} bytes; at most {limit}")
        self.size, self.limit = size, limit

    def __reduce__(self):
        return type(self), (self.size, self.limit)
