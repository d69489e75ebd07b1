"""The key-step rule (``dstar.golden.schedule.is_key_step``) against its statement in the spec:
the first call, then every ``refresh``-th; ``refresh`` 0: the first only."""

import pytest

from dstar.golden.schedule import is_key_step


@pytest.mark.parametrize(("refresh", "keys"), [
    (0, [0]),
    (1, list(range(10))),
    (3, [0, 3, 6, 9]),
    (4, [0, 4, 8]),
    (10, [0]),
])
def test_key_steps_are_the_first_and_every_refresh_th(refresh, keys):
    assert [i for i in range(10) if is_key_step(i, refresh)] == keys
