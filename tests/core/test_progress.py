"""Progress lines of long jobs: [i/N] and an ETA from the steps measured so far."""

from studylib.core.progress import Progress, duration


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_eta_is_the_mean_measured_step_times_the_steps_left():
    clock = Clock()
    progress = Progress(5, clock)
    progress.skip()  # a journaled step: counted, not timed
    clock.now = 10.0
    assert progress.step() == "[2/5, ETA 30 s]"
    clock.now = 30.0  # this step took 20 s: the mean is 15 s, 2 steps left
    assert progress.step() == "[3/5, ETA 30 s]"
    clock.now = 31.0
    progress.step()
    clock.now = 32.0
    assert progress.step() == "[5/5, last]"


def test_durations_read_as_a_person_would_say_them():
    assert duration(42.4) == "42 s"
    assert duration(185) == "3 min 05 s"
    assert duration(3720) == "1 h 02 min"
    assert duration(-3) == "0 s"
