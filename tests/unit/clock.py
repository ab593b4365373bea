"""A clock for code that waits: put in place of a module's ``time`` (``monkeypatch.setattr(module,
"time", Clock())``), it moves only when that code sleeps, so a wait of minutes is tested at once and
its sleeps are on record."""


class Clock:
    """monotonic() and time() move only with sleep(); ``slept`` lists every sleep."""

    def __init__(self):
        self.now = 1000.0
        self.slept = []

    def monotonic(self):
        return self.now

    def time(self):
        """Wall time, moving with monotonic()."""
        return 1_796_000_000.0 + self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds
