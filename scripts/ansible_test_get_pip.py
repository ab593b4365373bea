"""Stand-in for the get-pip.py that ansible-test bootstraps pip with (instinct.finetune).

ansible-test creates each sanity test's venv without pip, then runs get-pip.py with the packages it
wants (``pip==X.Y``) to put pip in; it downloads that script from ci-files.testing.ansible.com, which
a machine that reaches only PyPI cannot. scripts/ansible-test-sanity.sh copies this file to the
path ansible-test caches the script at (``~/.ansible/test/cache/get_pip_X_Y.py``), next to pip's
own wheel fetched from PyPI with its hash checked, and this runs pip from that wheel as get-pip.py
would: ``pip install --upgrade --force-reinstall`` of the packages named, nothing else.
"""

import os
import sys

# Marks the file as this stand-in: the sanity script only ever replaces a file that holds it.
MARKER = "instinct.finetune get-pip stand-in"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    # The wheel's file name is written in when the file is copied.
    sys.path.insert(0, os.path.join(here, "@WHEEL@"))
    from pip._internal.cli.main import main as pip_main  # noqa: PLC0415 - importable only from here

    # get-pip.py's own switches: with them it adds neither setuptools nor wheel, as here.
    args = [arg for arg in sys.argv[1:] if arg not in ("--no-setuptools", "--no-wheel")]
    return pip_main(["install", "--upgrade", "--force-reinstall", *args])


if __name__ == "__main__":
    sys.exit(main())
