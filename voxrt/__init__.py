"""voxrt: a realtime voice gateway in front of a deadline-scheduled speech-LM engine."""

__version__ = "0.1.0"
