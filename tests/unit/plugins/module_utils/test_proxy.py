"""The site's proxy as every stage applies it (module_utils/proxy.py, issue 31): the effective
no_proxy, the task environment, the apt snippet, and the secret rules. The no_proxy string is also
handed to the code that reads it on a node: urllib's (Ansible's get_url and uri, huggingface_hub's
fallbacks) and pip's vendored requests."""

import urllib.request

import pytest

from ansible_collections.instinct.finetune.plugins.module_utils import proxy

# Two nodes as the example inventory and the fabric role know them.
NODES = [
    {"name": "node1", "ansible_host": "192.0.2.11", "management": "192.0.2.11", "fabric": "10.10.0.11",
     "cidr": "10.10.0.0/16"},
    {"name": "node2", "ansible_host": "192.0.2.12", "management": "192.0.2.12", "fabric": "10.10.0.12",
     "cidr": "10.10.0.0/16"},
]  # fmt: skip
PROXY = "http://proxy.example.com:3128"
SECRET = "http://svc-build:s3cr%40t@proxy.example.com:3128"  # noqa: S105 - a made-up one, for the secret rules


def test_the_sites_entries_come_first_as_given_then_loopback_then_every_node():
    value = proxy.effective_no_proxy(".corp.example.com, mirror.corp.example.com", NODES)
    assert value.split(",") == [
        ".corp.example.com", "mirror.corp.example.com",
        "localhost", "127.0.0.1", "::1",
        "node1", "192.0.2.11", "10.10.0.11",
        "node2", "192.0.2.12", "10.10.0.12",
        "10.10.0.0/16",
    ]  # fmt: skip


def test_entries_are_deduplicated_keeping_the_first_spelling_and_the_order_is_stable():
    site = ["Node1", "10.10.0.11", "localhost", "10.10.0.11"]
    first = proxy.effective_no_proxy(site, NODES, extra=["192.0.2.11"])
    assert first == proxy.effective_no_proxy(list(site), [dict(n) for n in NODES], extra=["192.0.2.11"])
    entries = first.split(",")
    assert len(entries) == len({e.lower() for e in entries})
    assert entries[:3] == ["Node1", "10.10.0.11", "localhost"]
    assert "node1" not in entries  # "Node1" already names it


def test_a_list_or_a_string_of_site_entries_and_empty_values_are_all_accepted():
    assert proxy.split_no_proxy("a, b ,,c\nd") == ["a", "b", "c", "d"]
    assert proxy.split_no_proxy(["a,b", " c "]) == ["a", "b", "c"]
    assert proxy.split_no_proxy(None) == [] == proxy.split_no_proxy("")
    nodes = [{"name": "node3", "ansible_host": None, "management": "", "fabric": None}]
    assert proxy.effective_no_proxy([], nodes) == "localhost,127.0.0.1,::1,node3"


def test_a_management_address_the_inventory_sets_goes_straight_too():
    """The wheel server and node exporter bind instinct_management_address (issue 32): when the inventory
    sets it, the nodes reach it without the proxy; its default is ansible_host or the default route's
    address, both listed already."""
    nodes = [{"name": "node1", "ansible_host": "192.0.2.11", "management": "192.0.2.11", "listen": "10.1.0.11"}]
    assert proxy.effective_no_proxy([], nodes).split(",")[-3:] == ["node1", "192.0.2.11", "10.1.0.11"]


@pytest.mark.parametrize("bad", [{"a": 1}, 3, ["ok", 5]])
def test_a_no_proxy_that_is_neither_list_nor_string_is_refused_with_the_runbook(bad):
    with pytest.raises(ValueError, match=r"instinct_no_proxy .*docs/runbooks/proxy.md"):
        proxy.split_no_proxy(bad)


@pytest.mark.parametrize("bad", ['mirror"; Acquire::x "y', "a{b}", "host;other", "back\\slash"])
def test_a_no_proxy_entry_that_would_break_apts_configuration_is_refused(bad):
    with pytest.raises(ValueError, match=r"instinct_no_proxy holds .*docs/runbooks/proxy.md"):
        proxy.split_no_proxy([bad])
    # What a no_proxy legitimately holds passes as it is.
    kept = ["*", ".corp.example.com", "10.0.0.0/8", "[fd00::1]", "fd00::1", "mirror_1.example.com:8080"]
    assert proxy.split_no_proxy(kept) == kept


def test_no_proxy_set_means_an_empty_environment_so_the_nodes_own_stands():
    assert proxy.proxy_environment("", "", [".corp"], NODES) == {}
    assert proxy.proxy_environment(None, None, [], NODES) == {}
    # Nothing to write for apt either: the caller removes its file.
    assert proxy.apt_proxy_conf({}) == ""


def test_a_proxy_sets_both_cases_of_every_variable_the_tools_read():
    env = proxy.proxy_environment(PROXY, PROXY, [".corp"], NODES)
    assert set(env) == {"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy"}
    assert env["http_proxy"] == env["HTTPS_PROXY"] == PROXY
    assert env["NO_PROXY"] == env["no_proxy"] and env["no_proxy"].startswith(".corp,localhost,")
    # Only the proxy that is set.
    only_https = proxy.proxy_environment("", PROXY, [], NODES)
    assert "HTTP_PROXY" not in only_https and "http_proxy" not in only_https
    assert only_https["https_proxy"] == PROXY


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("http://192.0.2.11:8790/torch/", "192.0.2.11"),  # the wheel server on the management address
        ("http://10.10.0.11:29500", "10.10.0.11"),  # the rendezvous on the fabric address
        ("http://node2:9100/metrics", "node2"),  # a scrape by inventory name
        ("http://localhost:8000", "localhost"),
        ("https://mirror.corp.example.com/simple/", "mirror.corp.example.com"),  # the site's own entry
    ],
)
def test_node_to_node_and_site_addresses_bypass_the_proxy_in_urllib_and_pips_requests(url, host):
    no_proxy = proxy.effective_no_proxy(".corp.example.com", NODES)
    # urllib keys the environment's proxies by scheme: no_proxy becomes "no".
    assert urllib.request.proxy_bypass_environment(host, proxies={"no": no_proxy})
    requests_utils = pytest.importorskip("pip._vendor.requests.utils")
    assert requests_utils.should_bypass_proxies(url, no_proxy=no_proxy)


def test_the_outside_still_goes_through_the_proxy():
    no_proxy = proxy.effective_no_proxy(".corp.example.com", NODES)
    assert not urllib.request.proxy_bypass_environment("pypi.org", proxies={"no": no_proxy})
    requests_utils = pytest.importorskip("pip._vendor.requests.utils")
    assert not requests_utils.should_bypass_proxies("https://huggingface.co/api/models", no_proxy=no_proxy)
    # A fabric address that is in the CIDR but was not probed still bypasses it in requests (CIDR aware).
    assert requests_utils.should_bypass_proxies("http://10.10.0.99:8790/", no_proxy=no_proxy)


@pytest.mark.parametrize(
    "bad",
    ["proxy.example.com:3128", "socks5://proxy:1080", "http://", "http://proxy:99999", "http://proxy:3128 ",
     'http://pro"xy:3128', "http://a,b:3128", 3128],
)  # fmt: skip
def test_a_url_apt_pip_and_git_cannot_use_is_refused_naming_host_value_fix_and_runbook(bad):
    with pytest.raises(ValueError) as raised:
        proxy.proxy_environment(bad, "", [], NODES, host="node1")
    message = str(raised.value)
    assert message.startswith("node1: instinct_http_proxy is ")
    assert "http://proxy.example.com:3128" in message and "docs/runbooks/proxy.md" in message


def test_a_refusal_never_shows_the_password():
    with pytest.raises(ValueError) as raised:
        proxy.check_proxy_url("instinct_https_proxy", "ftp://svc-build:hunter2@proxy:3128", "node2")
    assert "hunter2" not in str(raised.value) and "svc-build:***@proxy:3128" in str(raised.value)


@pytest.mark.parametrize("url", [SECRET, "http://user@proxy:3128"])
def test_a_proxy_url_with_credentials_is_refused_since_the_task_environment_is_on_the_command_line(url):
    with pytest.raises(ValueError) as raised:
        proxy.proxy_environment(PROXY, url, [], NODES, host="node1")
    message = str(raised.value)
    assert message.startswith("node1: instinct_https_proxy is ") and "command lines (ps)" in message
    assert "s3cr" not in message and "docs/runbooks/proxy.md" in message


def test_credentials_make_an_environment_a_secret_and_are_redacted_for_display():
    assert proxy.is_secret({"HTTP_PROXY": SECRET}) and proxy.is_secret({"HTTPS_PROXY": "http://user@proxy:3128"})
    assert not proxy.is_secret(proxy.proxy_environment(PROXY, PROXY, [], NODES))
    assert not proxy.is_secret({})
    assert proxy.redact(SECRET) == "http://svc-build:***@proxy.example.com:3128"
    assert proxy.redact("http://token@proxy:3128") == "http://***@proxy:3128"
    assert proxy.redact(PROXY) == PROXY


def test_the_apt_snippet_sets_both_proxies_and_direct_exceptions_for_exact_hosts_only():
    tls = "http://tls-proxy.example.com:3129"
    env = proxy.proxy_environment(PROXY, tls, [".corp.example.com", "apt-mirror.corp.example.com"], NODES)
    lines = proxy.apt_proxy_conf(env).splitlines()
    body = [line for line in lines if not line.startswith("//")]
    assert body[:2] == [f'Acquire::http::Proxy "{PROXY}";', f'Acquire::https::Proxy "{tls}";']
    direct = body[2:]
    assert 'Acquire::http::Proxy::apt-mirror.corp.example.com "DIRECT";' in direct
    assert 'Acquire::https::Proxy::10.10.0.12 "DIRECT";' in direct
    assert 'Acquire::http::Proxy::localhost "DIRECT";' in direct
    # apt matches exact hosts: no suffix, CIDR or IPv6 key (its colons would split apt's option name).
    assert not [line for line in direct if "::." in line or "/16" in line or "::::1" in line]
    assert all(line.endswith('"DIRECT";') for line in direct)
    # Every line is a complete apt statement.
    assert all(line.endswith(";") for line in body)


def test_the_apt_snippet_has_only_the_proxy_that_is_set():
    text = proxy.apt_proxy_conf(proxy.proxy_environment("", PROXY, [], []))
    assert "Acquire::https::Proxy " in text and "Acquire::http::" not in text
