"""The checkout's ansible.cfg is what a real-cluster run from the checkout reads (scripts/env.sh
exports it): it must not point that run at the sandbox or accept unknown SSH host keys."""

import configparser

from tests.unit.conftest import ROOT


def read_cfg():
    parser = configparser.ConfigParser()
    parser.read(ROOT / "ansible.cfg")
    return parser


def test_a_run_from_the_checkout_names_its_own_inventory():
    assert not read_cfg().has_option("defaults", "inventory")


def test_ssh_host_keys_are_checked():
    cfg = read_cfg()
    for section in ("defaults", "ssh_connection"):
        if cfg.has_option(section, "host_key_checking"):
            assert cfg.getboolean(section, "host_key_checking"), section
