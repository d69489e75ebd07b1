"""An unknown option is reported under the usage line and name of the command it was given to
(issue 31's probe, O20: it was the top level's ``usage: dstar [-h] ... COMMAND``)."""

import pytest


@pytest.mark.parametrize("argv, prog", [
    (["config", "--bogus"], "dstar config"),
    (["bench", "cycles", "--bogus"], "dstar bench cycles"),
])
def test_an_unknown_option_names_its_command(capsys, argv, prog):
    from dstar.cli import main
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: {prog} "), err
    assert err.endswith(f"{prog}: error: unrecognized arguments: --bogus\n"), err
