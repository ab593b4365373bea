"""listen: where the collection's own listeners bind (issue 32, finding 5). The management address is
the inventory's choice (instinct_management_address), else the address Ansible reaches the node by
when the node holds it, else its default route's; never every address."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.instinct.finetune.plugins.filter.listen import FilterModule
from ansible_collections.instinct.finetune.plugins.module_utils.listen import (
    client_address,
    is_any_address,
    listen_spec,
    management_address,
)

FILTERS = FilterModule().filters()


def node(**values):
    """A node's host variables as hostvars[host] holds them after gathering its network facts."""
    facts = {"all_ipv4_addresses": ["192.0.2.11", "10.10.0.11"], "default_ipv4": {"address": "198.51.100.7"}}
    return {"inventory_hostname": "mi300x-01", "ansible_facts": facts, **values}


def test_ansible_host_is_the_management_address_when_the_node_holds_it():
    assert FILTERS["management_address"](node(ansible_host="192.0.2.11")) == "192.0.2.11"


def test_otherwise_the_default_routes_address():
    # A host name, an address behind NAT or a bastion (the node does not hold it), or none at all.
    for ansible_host in ("mi300x-01.example.org", "203.0.113.5", None):
        assert FILTERS["management_address"](node(ansible_host=ansible_host)) == "198.51.100.7"


def test_the_inventorys_address_wins():
    assert FILTERS["management_address"](node(ansible_host="192.0.2.11"), "10.10.0.11") == "10.10.0.11"
    assert FILTERS["management_address"](node(), "") == "198.51.100.7"


def test_every_address_is_never_the_management_address():
    with pytest.raises(AnsibleFilterError, match=r"mi300x-01: instinct_management_address is '0\.0\.0\.0'"):
        FILTERS["management_address"](node(), "0.0.0.0")  # noqa: S104 - the refused value


def test_no_address_fails_naming_the_node_what_was_seen_and_the_fix():
    with pytest.raises(ValueError, match="Set instinct_management_address") as raised:
        management_address("n1", ansible_host="n1.example.org", ipv4_addresses=["10.0.0.1"], default_ipv4=None)
    message = str(raised.value)
    assert message.startswith("n1: no management address")
    assert "'n1.example.org'" in message and "['10.0.0.1']" in message
    assert message.endswith("See docs/runbooks/fabric-iface.md.")
    # Without network facts at all (a play that gathered none) the filter fails rather than guess.
    with pytest.raises(AnsibleFilterError, match="no default IPv4 route"):
        FILTERS["management_address"]({"inventory_hostname": "n1"})


@pytest.mark.parametrize(
    ("address", "spec", "client"),
    [
        ("192.0.2.11", "192.0.2.11:9100", "192.0.2.11"),
        ("", ":9100", "127.0.0.1"),
        ("0.0.0.0", ":9100", "127.0.0.1"),  # noqa: S104 - recognised as every address
        ("::", ":9100", "127.0.0.1"),
        ("fd00::11", "[fd00::11]:9100", "[fd00::11]"),
        ("node1.mgmt.example", "node1.mgmt.example:9100", "node1.mgmt.example"),
    ],
)
def test_listen_spec_and_client_address(address, spec, client):
    assert listen_spec(address, 9100) == spec
    assert client_address(address) == client
    assert is_any_address(address) == (client == "127.0.0.1")
