"""Verify the smoke scenario: preflight ran on Ubuntu 22.04 nodes on two networks."""

import os
from pathlib import Path

CA_FILES = [Path(f) for f in os.environ.get("INSTINCT_CA_CERTIFICATES", "").split(",") if f]


def test_node_runs_jammy(host):
    assert host.system_info.distribution == "ubuntu"
    assert host.system_info.release == "22.04"


def test_node_sits_on_mgmt_and_fabric_networks(host):
    addresses = host.check_output("ip -o -4 addr show scope global")
    assert "172.28.10." in addresses
    assert "172.28.20." in addresses


def test_init_matches_the_image_variant(host):
    pid1 = host.check_output("cat /proc/1/comm")
    if host.backend.get_hostname() == "instinct-smoke-node2":
        assert pid1 == "systemd"
        assert host.check_output("systemctl is-system-running --wait") in {"running", "degraded"}
        # Services can be started and report success, which the service-managing roles rely on.
        assert host.run("systemd-run --unit instinct-smoke-probe --wait /bin/true").rc == 0
    else:
        assert pid1 == "sleep"


def test_extra_cas_are_in_the_trust_store(host):
    installed = host.run("ls /usr/local/share/ca-certificates/").stdout.split()
    assert sorted(installed) == sorted(f"instinct-{ca.stem}.crt" for ca in CA_FILES)
    bundle = host.file("/etc/ssl/certs/ca-certificates.crt").content_string
    for ca in CA_FILES:
        node_copy = host.file(f"/usr/local/share/ca-certificates/instinct-{ca.stem}.crt")
        assert node_copy.mode == 0o644
        assert node_copy.content_string.strip() == ca.read_text().strip()
        # update-ca-certificates ran: the certificate body is in the rebuilt bundle.
        body = "".join(ca.read_text().strip().splitlines()[1:-1])
        assert body in "".join(bundle.splitlines())


def test_pip_trusts_the_system_bundle_only_when_cas_were_added(host):
    pip_conf = host.file("/etc/pip.conf")
    if CA_FILES:
        assert "cert = /etc/ssl/certs/ca-certificates.crt" in pip_conf.content_string
    else:
        assert not pip_conf.exists


def test_tls_to_pypi_works_through_the_trust_store(host):
    # Python's ssl module uses the system store: this fails when a re-signing proxy's CA is missing.
    cmd = host.run(
        'python3 -c "import urllib.request; '
        "print(urllib.request.urlopen('https://pypi.org/simple/pip/', timeout=60).status)\""
    )
    assert cmd.rc == 0, cmd.stderr
    assert cmd.stdout.strip() == "200"
